#!/bin/sh
# Entry point of the image's `pull` stage (attnserve:pull): fill the model repository /models with
# attnserve-export pull, then exit. The compose stack runs it once as the `models` service before
# the server starts; Kubernetes runs it as the server pod's init container.
#
#   ATTNSERVE_LANGUAGES=en,de,fr     every Argos pair among these languages (docs/models.md)
#   ATTNSERVE_PULL_MODELS="Helsinki-NLP/opus-mt-en-de argos:en-es"   Hub ids and Argos pairs
#   ATTNSERVE_ARGOS_INDEX=URL|PATH   a mirror of the Argos index; HF_ENDPOINT / HF_TOKEN for the Hub
#   arguments, when given, are attnserve-export pull's own (e.g. --list)
#
# Nothing to pull: exit 0 at once (the server serves what /models holds). A model that fails is
# reported and skipped: the others are installed and the server serves them.
set -u
if [ "$#" -gt 0 ]; then
    exec attnserve-export pull "$@"
fi
if [ -z "${ATTNSERVE_LANGUAGES:-}${ATTNSERVE_PULL_MODELS:-}" ]; then
    echo "pull-models: ATTNSERVE_LANGUAGES and ATTNSERVE_PULL_MODELS are empty; nothing to pull"
    exit 0
fi
# shellcheck disable=SC2086 # ATTNSERVE_PULL_MODELS is a space-separated list
set -- ${ATTNSERVE_PULL_MODELS:-}
if [ -n "${ATTNSERVE_LANGUAGES:-}" ]; then
    set -- "$@" --languages "$ATTNSERVE_LANGUAGES"
fi
attnserve-export pull "$@" || echo "pull-models: a model failed to pull (see above); the others are installed"
exit 0
