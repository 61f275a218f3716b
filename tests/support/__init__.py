"""This repository's own fault-test machinery: the fault campaign, planted bugs, PostgreSQL
scratch schemas. Not shipped: a host tests its store with ``intention_kernel.testing``."""
