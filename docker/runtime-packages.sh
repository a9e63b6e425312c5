#!/bin/sh
# Prints the Debian packages that hold the shared libraries a binary loads,
# so that the runtime image installs exactly those (names differ between
# releases and distributions; this asks the build image's own dpkg).
# CUDA's libraries come with the CUDA runtime base image, not from here.
set -eu
ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
  real=$(readlink -f "$lib")
  case "$real" in /usr/local/cuda*) continue ;; esac
  # dpkg records some files under /lib and others under /usr/lib
  for p in "$real" "$lib" "${real#/usr}" "/usr$lib"; do
    if pkg=$(dpkg-query -S "$p" 2>/dev/null); then
      echo "${pkg%%:*}"
      break
    fi
  done
done | sort -u
