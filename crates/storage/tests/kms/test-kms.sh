#!/bin/sh
# A KMS plug-in for the tests of encryption at rest: it wraps data keys with AES-256-CBC
# (openssl) under a master key that the storage node never sees, bound to the key's id. Its
# first argument is the master key's file (64 hexadecimal digits); the node appends the
# plug-in interface's arguments (`wrap ID` or `unwrap ID`) and writes the data key, or the
# wrapped key, on standard input (see storage::crypt).
set -eu
master=$(cat "$1")
op=$2
id=$3
read -r line
case "$op" in
wrap)
    iv=$(openssl rand -hex 16)
    ct=$(printf '%s' "$line" | openssl enc -aes-256-cbc -K "$master" -iv "$iv" -a -A)
    printf 'tkms1:%s:%s:%s\n' "$id" "$iv" "$ct"
    ;;
unwrap)
    rest=${line#tkms1:}
    kid=${rest%%:*}
    rest=${rest#*:}
    iv=${rest%%:*}
    ct=${rest#*:}
    if [ "$kid" != "$id" ]; then
        echo "data key $id was wrapped as data key $kid" >&2
        exit 3
    fi
    printf '%s' "$ct" | openssl enc -d -aes-256-cbc -K "$master" -iv "$iv" -a -A
    echo
    ;;
*)
    echo "unknown operation $op" >&2
    exit 2
    ;;
esac
