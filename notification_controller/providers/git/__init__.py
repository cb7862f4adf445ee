"""The git forges: commit statuses, pull/merge request comments, repository dispatch (``base.py``)."""
