#!/bin/sh
# Runs one build step behind an optional proxy, trusting optional extra CA
# certificates. Everything it writes lives in a temporary directory that is
# gone when the step ends, so no proxy setting or certificate reaches a layer.
#   APT_PROXY        http(s) proxy for apt (build argument; in the runtime
#                    stage, the build stage's /out/apt-proxy)
#   /run/secrets/extra_ca   PEM bundle (build secret "extra_ca")
# pip reads its own settings from the PIP_* build arguments.
set -eu
if [ -z "${APT_PROXY:-}" ] && [ -r /run/qac-build/apt-proxy ]; then
  APT_PROXY=$(cat /run/qac-build/apt-proxy)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
: > "$tmp/apt.conf"
if [ -n "${APT_PROXY:-}" ]; then
  printf 'Acquire::http::Proxy "%s";\nAcquire::https::Proxy "%s";\n' "$APT_PROXY" "$APT_PROXY" >> "$tmp/apt.conf"
fi
extra=/run/secrets/extra_ca
if [ -s "$extra" ]; then
  # Trust the distribution's roots (once ca-certificates is installed) plus
  # the extra ones; without the roots, the extra ones alone, which is what a
  # TLS-intercepting proxy needs.
  if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    cat /etc/ssl/certs/ca-certificates.crt "$extra" > "$tmp/ca.crt"
  else
    cat "$extra" > "$tmp/ca.crt"
  fi
  printf 'Acquire::https::CaInfo "%s";\n' "$tmp/ca.crt" >> "$tmp/apt.conf"
  export PIP_CERT="$tmp/ca.crt" SSL_CERT_FILE="$tmp/ca.crt" REQUESTS_CA_BUNDLE="$tmp/ca.crt" \
         CURL_CA_BUNDLE="$tmp/ca.crt" GIT_SSL_CAINFO="$tmp/ca.crt"
fi
export APT_CONFIG="$tmp/apt.conf"
"$@"
