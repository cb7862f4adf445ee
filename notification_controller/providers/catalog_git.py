"""Git forge (commit status, PR/MR comments, dispatch) and SDK-based providers: one import line per module."""
