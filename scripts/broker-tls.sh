#!/usr/bin/env bash
# Generates fresh TLS material for ActiveMQ's stomp+ssl connectors into DIR, with the
# JDK's keytool (and openssl for the client's PEM key, when openssl is there):
#
#   ca.pem                       the CA that signs everything below: INBOXD_STOMP_CA_FILE
#   broker.ks                    the broker's key and certificate (PKCS12): <sslContext keyStore=…>
#   broker.ts                    the CA again, as the broker's truststore for client
#                                certificates (transport.needClientAuth=true): <sslContext trustStore=…>
#   client.pem, client-key.pem   a client certificate signed by the CA, for mutual TLS:
#                                INBOXD_STOMP_CERT_FILE, INBOXD_STOMP_KEY_FILE (needs openssl)
#   expired.ks                   the broker's key with a certificate that expired two days ago (tests)
#   ca.p12                       the CA's key (keytool -gencert signs with it)
#
# Every store's password is "inboxd-dev": this material is for development and tests only,
# and a new CA is made on each run.
#
#   scripts/broker-tls.sh DIR [SAN]      SAN defaults to dns:localhost,ip:127.0.0.1
set -euo pipefail

dir=${1:?usage: $0 DIR [SAN]}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd) # the work happens elsewhere
san=${2:-dns:localhost,ip:127.0.0.1}
pw=inboxd-dev
# The JVM flags only make each keytool start faster (it runs a dozen times).
kt() { keytool -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -storepass "$pw" -storetype PKCS12 "$@"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# The CA: a self-signed EC P-256 key, allowed to sign certificates and nothing else.
kt -genkeypair -alias ca -keystore ca.p12 -keyalg EC -groupname secp256r1 -validity 3650 \
  -dname "CN=inboxd development broker CA" -ext bc:c -ext KeyUsage=keyCertSign,cRLSign
kt -exportcert -alias ca -keystore ca.p12 -rfc -file ca.pem

# The broker: an EC key, its certificate signed by the CA, the CA to complete the chain.
kt -genkeypair -alias broker -keystore broker.ks -keyalg EC -groupname secp256r1 -dname "CN=inboxd broker"
kt -certreq -alias broker -keystore broker.ks -file broker.csr
gencert() { # OUT [options…]
  local out=$1
  shift
  kt -gencert -alias ca -keystore ca.p12 -infile broker.csr -outfile "$out" -rfc \
    -ext "SAN=$san" -ext KeyUsage=digitalSignature -ext ExtendedKeyUsage=serverAuth "$@"
}
gencert broker.pem -validity 825
gencert expired.pem -startdate -3d -validity 1
kt -importcert -alias ca -keystore broker.ks -file ca.pem -noprompt
cp broker.ks expired.ks
kt -importcert -alias broker -keystore broker.ks -file broker.pem -noprompt
kt -importcert -alias broker -keystore expired.ks -file expired.pem -noprompt

kt -importcert -alias ca -keystore broker.ts -file ca.pem -noprompt

if command -v openssl >/dev/null; then
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client-key.pem \
    -subj "/CN=inboxd-test-client" -out client.csr 2>/dev/null
  kt -gencert -alias ca -keystore ca.p12 -infile client.csr -outfile client.pem -rfc -validity 825 \
    -ext KeyUsage=digitalSignature -ext ExtendedKeyUsage=clientAuth
else
  echo "broker-tls: openssl not found: no client certificate (mutual TLS) generated" >&2
fi

rm -f "$dir/client.pem" "$dir/client-key.pem" # never leave a client certificate of an older CA
chmod 600 ca.p12 broker.ks broker.ts expired.ks
chmod 644 ca.pem
[[ -f client.pem ]] && chmod 600 client-key.pem && chmod 644 client.pem
# Move into place file by file; the broker reads its stores only when it starts.
for f in ca.p12 ca.pem broker.ks broker.ts expired.ks client.pem client-key.pem; do
  [[ -f $f ]] && mv -f "$f" "$dir/$f"
done
echo "broker-tls: CA and keystores for $san in $dir" >&2
