"""The smallest host project, used by .ci/package against the installed wheel."""
