# shellcheck shell=bash
# The variables set here are read by the suites that load helpers.bash.
# shellcheck disable=SC2034
# TLS for the end-to-end suites (sourced by helpers.bash): a test PKI made at test time with
# openssl (never the system CA store), the fake upstream serving HTTPS, and nginx as an HTTPS
# front (HTTP/2 or HTTP/1.1) before a plain-http fake.
#
#   make_test_pki DIR            the PKI below, once (idempotent); exports TEST_PKI=DIR
#   start_tls_fake NAME [CERT] [FAKE ARGS...]   a fake on https://localhost:PORT
#   start_h2_front PORT_FILE UPSTREAM_PORT [h2|h1]   nginx, TLS, proxying to 127.0.0.1:UPSTREAM_PORT
#
# A TLS fake is a node like the others (NAME.port / .pid / .log): node_url gives its https URL
# (NAME.url), fake_control / fake_stats reach it with the right CA and client certificate
# (NAME.curl: one curl argument a line).

# ---------------------------------------------------------------------------------------------------
# The test PKI

# Makes, in DIR (once: a second call returns at once), EC P-256 keys and certificates:
#   ca.pem ca.key               the test CA (trusted by tests through tls.ca_file)
#   server.pem server.key       DNS:localhost, IP:127.0.0.1, signed by the CA
#   expired.pem                 the same names, validity over in 2021 (key: server.key)
#   not_yet_valid.pem           the same names, valid from 2090 on (key: server.key)
#   wrong_host.pem              DNS:other.invalid only (key: server.key)
#   unknown_ca.pem              DNS:localhost, IP:127.0.0.1, signed by other_ca (trusted by nobody)
#   client_ca.pem client_ca.key a CA for client certificates (the fake's --tls-client-ca)
#   client.pem client.key       a client certificate (clientAuth) signed by client_ca
#   client_unknown.pem          a client certificate signed by other_ca (key: client.key)
# Leaves are signed with `openssl ca` (OpenSSL 3.0's x509 has no way to set a past validity).
# Exports TEST_PKI=DIR (so a call in setup_file serves the file's tests).
make_test_pki() { # DIR
  local dir=$1
  export TEST_PKI=$dir
  [[ -f $dir/.done ]] && return 0
  mkdir -p "$dir/db/new"
  (
    set -e
    cd "$dir"
    : >db/index.txt
    echo 1000 >db/serial
    cat >openssl.cnf <<EOF
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = unused
[ ca ]
default_ca = test_ca
[ test_ca ]
database = $dir/db/index.txt
new_certs_dir = $dir/db/new
serial = $dir/db/serial
default_md = sha256
default_days = 3650
policy = any_name
unique_subject = no
copy_extensions = none
email_in_dn = no
[ any_name ]
commonName = supplied
[ ca_ext ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ server_ext ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
authorityKeyIdentifier = keyid
[ wrong_host_ext ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:other.invalid
authorityKeyIdentifier = keyid
[ client_ext ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
EOF
    export OPENSSL_CONF=$dir/openssl.cnf
    local name
    for name in ca other_ca client_ca server client; do
      openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name.key" 2>/dev/null
    done
    chmod 600 ./*.key
    # Self-signed CAs.
    for name in ca other_ca client_ca; do
      openssl req -new -x509 -key "$name.key" -subj "/CN=rpcroute test $name" -days 3650 \
        -extensions ca_ext -config openssl.cnf -out "$name.pem"
    done
    openssl req -new -key server.key -subj /CN=localhost -config openssl.cnf -out server.csr
    openssl req -new -key client.key -subj /CN=rpcroute-test-client -config openssl.cnf -out client.csr
    # sign OUT CA CSR EXTENSIONS [openssl ca options]
    sign() {
      local out=$1 ca=$2 csr=$3 ext=$4
      shift 4
      openssl ca -batch -notext -config openssl.cnf -cert "$ca.pem" -keyfile "$ca.key" \
        -in "$csr" -extensions "$ext" -out "$out" "$@" 2>/dev/null
    }
    sign server.pem ca server.csr server_ext
    sign expired.pem ca server.csr server_ext -startdate 20200101000000Z -enddate 20210101000000Z
    sign not_yet_valid.pem ca server.csr server_ext -startdate 20900101000000Z -enddate 20910101000000Z
    sign wrong_host.pem ca server.csr wrong_host_ext
    sign unknown_ca.pem other_ca server.csr server_ext
    sign client.pem client_ca client.csr client_ext
    sign client_unknown.pem other_ca client.csr client_ext
  ) || {
    echo "make_test_pki: openssl failed in $dir" >&2
    return 1
  }
  touch "$dir/.done"
}

# ---------------------------------------------------------------------------------------------------
# The fake upstream over TLS

# Curl arguments to reach node NAME (none for a plain-http node): its CA, its client certificate.
node_curl_args() { # NAME
  local f
  f=$(_node_file "$1" curl 2>/dev/null) || return 0
  cat "$f"
}

# Starts the fake upstream NAME serving HTTPS with certificate CERT of the test PKI (default
# server; a name from make_test_pki's list, key server.key) and waits up to 10 s until it answers
# (a TCP connect only with --tls-handshake hang). Its URL is https://localhost:PORT. FAKE ARGS may
# hold --tls-client-ca FILE (then curl presents client.pem) and --tls-handshake hang.
# Needs make_test_pki first (TEST_PKI).
start_tls_fake() { # NAME [CERT] [FAKE ARGS...]
  local name=$1 cert=server dir pid port deadline hang=0 mtls=0 ready
  shift
  if (($#)) && [[ $1 != -* ]]; then
    cert=$1
    shift
  fi
  if [[ -z ${TEST_PKI:-} || ! -f $TEST_PKI/.done ]]; then
    echo "start_tls_fake: call make_test_pki first" >&2
    return 1
  fi
  local args=("$@") i
  for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
      --tls-handshake) [[ ${args[i + 1]:-} != hang ]] || hang=1 ;;
      --tls-handshake=hang) hang=1 ;;
      --tls-client-ca | --tls-client-ca=*) mtls=1 ;;
    esac
  done
  dir=$(_proc_dir)
  {
    echo --cacert
    echo "$TEST_PKI/ca.pem"
    if ((mtls)); then
      printf '%s\n' --cert "$TEST_PKI/client.pem" --key "$TEST_PKI/client.key"
    fi
  } >"$dir/$name.curl"
  rm -f "$dir/$name.port.tmp"
  "$FAKE_BIN" --listen 127.0.0.1:0 --port-file "$dir/$name.port.tmp" --name "$name" \
    --tls-cert "$TEST_PKI/$cert.pem" --tls-key "$TEST_PKI/server.key" "$@" \
    </dev/null >"$dir/$name.log" 2>&1 3>&- &
  pid=$!
  echo "$pid" >"$dir/$name.pid"
  deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
    port=$(cat "$dir/$name.port.tmp" 2>/dev/null || true)
    port=${port//[[:space:]]/}
    ready=0
    if [[ $port =~ ^[0-9]+$ ]]; then
      if ((hang)); then
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && ready=1
      elif [[ $cert == server ]]; then
        local curl_args
        mapfile -t curl_args <"$dir/$name.curl"
        curl -sf --max-time 2 "${curl_args[@]}" "https://localhost:$port/_stats" >/dev/null 2>&1 && ready=1
      else
        # A certificate curl must refuse: any TLS answer will do.
        curl -sk --max-time 2 "https://127.0.0.1:$port/_stats" >/dev/null 2>&1 && ready=1
      fi
    fi
    if ((ready)); then
      echo "$port" >"$dir/$name.port"
      echo "https://localhost:$port" >"$dir/$name.url"
      return 0
    fi
    sleep 0.02
  done
  echo "start_tls_fake $name: fake_upstream did not answer over TLS" >&2
  cat "$dir/$name.log" >&2
  return 1
}

# ---------------------------------------------------------------------------------------------------
# nginx as an HTTPS front

# Starts nginx (one worker, its own prefix $PORT_FILE.nginx/) on a free port of 127.0.0.1 with TLS
# (the test PKI's server certificate: https://localhost:PORT), HTTP/2 and HTTP/1.1 by ALPN (h2,
# the default) or HTTP/1.1 only (h1), proxying every request over plain HTTP/1.1 keep-alive to
# 127.0.0.1:UPSTREAM_PORT. Writes the port to PORT_FILE once nginx answers /_stats. Its access log,
# front_log PORT_FILE, has one line a request:
#   PROTOCOL STATUS CONNECTION CONNECTION_REQUESTS METHOD URI      (e.g. "HTTP/2.0 200 3 7 POST /")
# It is a node named after PORT_FILE (front-BASENAME): stop_all (teardown) stops it.
start_h2_front() { # PORT_FILE UPSTREAM_PORT [h2|h1]
  local port_file=$1 upstream=$2 kind=${3:-h2} prefix port pid deadline listen name procs
  prefix=$port_file.nginx
  name=front-$(basename "${port_file%.port}")
  procs=$(_proc_dir)
  mkdir -p "$prefix/logs" "$prefix/temp"
  chmod 755 "$prefix" "$prefix/temp"  # workers run as nobody when nginx is started by root
  for _ in 1 2 3; do
    port=$(free_port)
    listen="127.0.0.1:$port ssl"
    [[ $kind == h1 ]] || listen+=" http2"
    cat >"$prefix/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $prefix/nginx.pid;
error_log $prefix/logs/error.log warn;
events { worker_connections 1024; }
http {
  log_format front '\$server_protocol \$status \$connection \$connection_requests \$request_method \$request_uri';
  access_log $prefix/logs/access.log front;
  client_body_temp_path $prefix/temp/body;
  proxy_temp_path $prefix/temp/proxy;
  fastcgi_temp_path $prefix/temp/fastcgi;
  uwsgi_temp_path $prefix/temp/uwsgi;
  scgi_temp_path $prefix/temp/scgi;
  client_body_buffer_size 1m;
  keepalive_requests 100000;
  upstream fake { server 127.0.0.1:$upstream; keepalive 16; }
  server {
    listen $listen;
    server_name localhost;
    ssl_certificate $TEST_PKI/server.pem;
    ssl_certificate_key $TEST_PKI/server.key;
    location / {
      proxy_pass http://fake;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
    nginx -p "$prefix" -e "$prefix/logs/error.log" -c "$prefix/nginx.conf" </dev/null \
      >"$prefix/logs/stdout.log" 2>&1 3>&- &
    pid=$!
    echo "$pid" >"$procs/$name.pid"
    deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
      # Ready once the upstream answers through it (a fake's 200; anvil's 404 for a GET).
      if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$TEST_PKI/ca.pem" \
        "https://localhost:$port/_stats" 2>/dev/null) == [24]0[0-9] ]]; then
        echo "$port" >"$port_file"
        echo "$port" >"$procs/$name.port"
        echo "https://localhost:$port" >"$procs/$name.url"
        return 0
      fi
      sleep 0.05
    done
    _stop_pid "$pid"  # the port was taken between free_port and nginx's bind: try another
  done
  echo "start_h2_front: nginx did not answer on https://localhost:$port" >&2
  cat "$prefix/logs/error.log" >&2
  return 1
}

# The access log of the front started with PORT_FILE.
front_log() { # PORT_FILE
  echo "$1.nginx/logs/access.log"
}
