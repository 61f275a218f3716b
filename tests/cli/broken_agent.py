"""A module whose import fails the way a half-deployed project does (for check-compat)."""

raise RuntimeError("settings are not configured")
