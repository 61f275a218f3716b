"""Example agents built on the kernel; the demo (``python -m intention_kernel.demo``) runs one."""
