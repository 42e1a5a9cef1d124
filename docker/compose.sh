#!/usr/bin/env bash
# The compose stack of docker/docker-compose.yml with whichever compose this machine has:
# `docker compose` (v2) when the docker CLI has the plugin, else `docker-compose` (v1.29,
# Debian's docker.io). Run from anywhere:
#
#   docker/compose.sh up        build the CPU image when it is missing, then start detached
#   docker/compose.sh build     build the CPU image (again)
#   docker/compose.sh ps | logs | stop | down | ...    passed to compose as they are
#
# Offline by default: the build reaches no container registry and no package index. The base
# image is $ATTNSERVE_BASE_IMAGE (default attnserve-base:py311-bookworm), built here from
# Debian's packages by docker/base-image.sh (root and debootstrap) when it is not a local image;
# every pip install in the build reads $ATTNSERVE_WHEELHOUSE (default docker/wheelhouse),
# filled here by the host's pip when it holds no wheel. ATTNSERVE_BASE_IMAGE=python:3.11-slim-bookworm
# takes the base image from Docker Hub instead.
#
# A failed build or start leaves nothing behind: the stack's containers, network and volumes,
# the untagged layers this build made, and the base image and wheelhouse this run made are
# removed, and the script exits non-zero.
set -Eeuo pipefail  # -E: the ERR trap of build() also fires inside the functions it calls
cd "$(dirname "$0")/.."

FILE=docker/docker-compose.yml
DEFAULT_BASE=attnserve-base:py311-bookworm
export ATTNSERVE_BASE_IMAGE="${ATTNSERVE_BASE_IMAGE:-$DEFAULT_BASE}"
export ATTNSERVE_WHEELHOUSE="${ATTNSERVE_WHEELHOUSE:-docker/wheelhouse}"
PYTHON="${PYTHON:-python3}"

if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    echo "compose.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi
compose() { "${COMPOSE[@]}" -f "$FILE" "$@"; }

made_base=""
made_wheelhouse=""
images_before=""

base_image() {
    docker image inspect "$ATTNSERVE_BASE_IMAGE" >/dev/null 2>&1 && return 0
    if [ "$ATTNSERVE_BASE_IMAGE" != "$DEFAULT_BASE" ]; then
        docker pull "$ATTNSERVE_BASE_IMAGE"  # a registry image, asked for by name
        return
    fi
    echo "compose.sh: building the base image $DEFAULT_BASE from Debian's packages (docker/base-image.sh)"
    made_base=yes
    bash docker/base-image.sh "$DEFAULT_BASE"
}

wheelhouse() {
    ls "$ATTNSERVE_WHEELHOUSE"/*.whl >/dev/null 2>&1 && return 0
    echo "compose.sh: downloading the build's wheels into $ATTNSERVE_WHEELHOUSE"
    made_wheelhouse=yes
    mkdir -p "$ATTNSERVE_WHEELHOUSE"
    # the import extra: the export extra (the build stage) plus what the models service's pull stage adds
    "$PYTHON" docker/requirements.py --extra import >"$ATTNSERVE_WHEELHOUSE/requirements.txt"
    # torch's CPU build (the image builds the bundled models on the CPU; PyPI's Linux wheel is CUDA's)
    # (TORCH_INDEX_URL= empty: the host's own indexes only)
    local torch_index="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
    # pip wheel: the published wheels as they are, and a wheel built here for any pure-Python
    # requirement published only as source, since the build installs with --no-index
    "$PYTHON" -m pip wheel -q --prefer-binary -w "$ATTNSERVE_WHEELHOUSE" \
        ${torch_index:+--extra-index-url "$torch_index"} \
        -r "$ATTNSERVE_WHEELHOUSE/requirements.txt" "setuptools>=77" wheel
    rm -f "$ATTNSERVE_WHEELHOUSE/requirements.txt"
}

clean_up_failure() {
    echo "compose.sh: failed; removing what this run made" >&2
    compose down --volumes --remove-orphans >/dev/null 2>&1 || true
    # the classic builder keeps a failed build's layers as untagged images: those new since the start
    local now
    now="$(docker images -a --format '{{.ID}} {{.Repository}}' | awk '$2 == "<none>" {print $1}' | sort -u)"
    local new
    new="$(comm -13 <(echo "$images_before") <(echo "$now"))"
    [ -z "$new" ] || docker rmi -f $new >/dev/null 2>&1 || true
    [ -z "$made_base" ] || docker rmi "$ATTNSERVE_BASE_IMAGE" >/dev/null 2>&1 || true
    [ -z "$made_wheelhouse" ] || find "$ATTNSERVE_WHEELHOUSE" -mindepth 1 ! -name .gitignore -delete || true
}

build() {
    images_before="$(docker images -a --format '{{.ID}} {{.Repository}}' | awk '$2 == "<none>" {print $1}' | sort -u)"
    trap clean_up_failure ERR
    base_image
    wheelhouse
    compose build "$@"
    trap - ERR
}

case "${1:-}" in
up)
    shift
    # the server's image and the models service's (the pull stage); build both when one is missing
    docker image inspect "${ATTNSERVE_IMAGE:-attnserve:cpu}" "${ATTNSERVE_PULL_IMAGE:-attnserve:pull}" \
        >/dev/null 2>&1 || build
    images_before="$(docker images -a --format '{{.ID}} {{.Repository}}' | awk '$2 == "<none>" {print $1}' | sort -u)"
    trap clean_up_failure ERR
    compose up -d "$@"
    trap - ERR
    ;;
build)
    shift
    build "$@"
    ;;
"" | -h | --help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    ;;
*)
    compose "$@"
    ;;
esac
