// Progressive enhancement only: every page works without this file.
// On the reconcile form, the value field is shown for a completed write only.
(function () {
  "use strict";
  var form = document.getElementById("reconcile-form");
  if (!form) { return; }
  var value = document.getElementById("value");
  var label = form.querySelector('label[for="value"]');
  var hint = document.getElementById("value-hint");
  function update() {
    var chosen = form.querySelector('input[name="outcome"]:checked');
    var show = !chosen || chosen.value === "completed";
    [value, label, hint].forEach(function (el) { if (el) { el.hidden = !show; } });
    if (!show) { value.value = ""; }
  }
  form.addEventListener("change", update);
  update();
}());
