#!/usr/bin/env bash
# Makes a job's TLS files (docs/security.md): a certificate authority and,
# for each NAME given, a certificate it signs with its private key.
#
# Usage: deploy/tls-certs.sh DIR NAME...
#   DIR/ca.pem   the CA's certificate: pass it as --tls-ca on every host
#   DIR/ca.key   the CA's key: keep it off the cluster once the certificates exist
#   DIR/NAME.pem, DIR/NAME.key   --tls-cert and --tls-key for the hosts named NAME
# Keys are EC P-256, written with mode 0600; certificates are valid for
# MERAK_TLS_DAYS days (default 30). An existing CA in DIR is reused, so
# certificates for more hosts can be added later.
set -euo pipefail
dir=${1:?usage: deploy/tls-certs.sh DIR NAME...}
shift
[[ $# -ge 1 ]] || { echo "deploy/tls-certs.sh: name at least one certificate (e.g. the host)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "deploy/tls-certs.sh: needs the openssl command (apt-get install openssl)" >&2; exit 1; }
days=${MERAK_TLS_DAYS:-30}
mkdir -p "$dir"
umask 077
if [[ ! -f $dir/ca.pem ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" -subj "/CN=merak job CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  chmod 644 "$dir/ca.pem"
fi
for name in "$@"; do
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "deploy/tls-certs.sh: '$name' is not a plain host name" >&2; exit 1; }
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$name" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:%s\n' "$name" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$dir/$name.pem" -days "$days" -extfile "$dir/$name.ext" 2>/dev/null
  chmod 644 "$dir/$name.pem"
  rm -f "$dir/$name.csr" "$dir/$name.ext"
  echo "$dir/$name.pem $dir/$name.key"
done
