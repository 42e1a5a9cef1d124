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
# reported and skipped: the others are installed and the server serves them (exit 0).
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
# This shell is the container's PID 1, which SIGTERM (docker stop, a deleted pod) reaches alone: pass
# it on, so the pull removes the model it was writing and says what it installed, rather than being
# killed outright when the grace period ends. A stopped pull exits as it does (143, 130), not 0.
attnserve-export pull "$@" &
pull=$!
trap 'kill -TERM "$pull" 2>/dev/null' TERM INT
code=0
wait "$pull" || code=$?
while kill -0 "$pull" 2>/dev/null; do  # the wait ended for the signal: the pull is still cleaning up
    code=0
    wait "$pull" || code=$?
done
if [ "$code" -gt 128 ]; then
    exit "$code"
fi
if [ "$code" -ne 0 ]; then
    echo "pull-models: a model failed to pull (see above); the others are installed"
fi
exit 0
