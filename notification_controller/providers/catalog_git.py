"""Git forge (commit status, PR/MR comments, dispatch) and SDK-based providers: one import line per module."""

from . import (  # noqa: F401  (each module registers its notifier)
    azuredevops,
    azureeventhub,
    bitbucket,
    bitbucketserver,
    gitea,
    giteaprcomment,
    github,
    githubdispatch,
    githubprcomment,
    gitlab,
    gitlabmrcomment,
    googlepubsub,
    nats,
    otel,
)
