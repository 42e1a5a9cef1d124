#!/usr/bin/env bash
# Build a minimal Debian bookworm image with Python 3.11 (python3 + venv) from Debian's
# packages alone, for machines that reach Debian's mirror but no container registry.
# It stands in for python:3.11-slim-bookworm:
#   docker/base-image.sh attnserve-base:bookworm
#   docker compose build --build-arg BASE_IMAGE=attnserve-base:bookworm   (or ATTNSERVE_BASE_IMAGE=...)
# Needs root, debootstrap and a docker daemon; takes about a minute.
set -euo pipefail
name="${1:-attnserve-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
rootfs="$(mktemp -d /tmp/attnserve-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror"
# What a slim image leaves out: package caches, docs, man pages, translations.
rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
tar -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$name"
echo "built $name"
