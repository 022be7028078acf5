# Sourced, not run: the engine set-up the H200 scripts share (tests/gpu/h200_image_e2e.sh,
# tests/gpu/h200_build_bench.sh). Expects REPO, OUT, BUNDLE, ENG, CDI_DIR and PY set; leaves
# DOCKER_HOST pointing at a started engine (stopped on exit) with CDI on and, unless NO_GPU is
# set, a CDI spec for the machine's GPUs; PYTHONPATH with the bundle's wheels (docker,
# tomlkit) and the checkout; ENVBUILD_UV when the bundle carries uv. Returns non-zero when the
# engine does not come up.
# What .cache/h200/ holds: tests/gpu/make_engine_bundle.sh (Debian 13's dockerd 26.1.5,
# containerd, runc, the docker CLI; the docker and tomlkit wheels; uv, xz-compressed).

h200_engine_up() {
    if ls "$BUNDLE"/whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/h200-site "$BUNDLE"/whl/*.whl || return 1
        export PYTHONPATH=/tmp/h200-site:$REPO${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH}
    else
        export PYTHONPATH=$REPO${EXTRA_PYTHONPATH:+:$EXTRA_PYTHONPATH}
    fi

    # uv, for `envbuild lock` of the requests with extra packages there (xz: the bundle must
    # fit the 64 MiB a device call carries).
    if [ -f "$BUNDLE/uv.xz" ]; then
        mkdir -p /tmp/h200-uv && xz -dc "$BUNDLE/uv.xz" > /tmp/h200-uv/uv && chmod 0755 /tmp/h200-uv/uv
        export ENVBUILD_UV=/tmp/h200-uv/uv
        echo "== $("$ENVBUILD_UV" --version)"
    fi

    echo "== engine (state in $ENG)"
    mkdir -p "$ENG/bin" "$CDI_DIR"
    tar -xJf "$BUNDLE/eng.tar.xz" -C "$ENG" || return 1
    # Debian 13's runc needs glibc >= 2.38 (the H200 image has 2.39); elsewhere the machine's own.
    if ! "$ENG/bin/runc" --version >/dev/null 2>&1 && command -v runc >/dev/null; then
        echo "bundled runc does not run here; using $(command -v runc)"
        cp "$(command -v runc)" "$ENG/bin/runc"
    fi
    export PATH=$ENG/bin:$PATH
    cat > "$ENG/daemon.json" <<J
{"features": {"cdi": true}, "cdi-spec-dirs": ["$CDI_DIR"], "iptables": false, "ip-masq": false,
 "bridge": "none", "userland-proxy": false, "data-root": "$ENG/data", "exec-root": "$ENG/exec",
 "pidfile": "$ENG/docker.pid", "hosts": ["unix://$ENG/docker.sock"]}
J
    setsid containerd --address "$ENG/containerd.sock" --root "$ENG/containerd" \
        --state "$ENG/containerd-state" > "$OUT/containerd.log" 2>&1 < /dev/null &
    echo $! > "$ENG/containerd.pid"
    for _ in $(seq 40); do [ -S "$ENG/containerd.sock" ] && break; sleep 0.25; done
    setsid dockerd --config-file "$ENG/daemon.json" --containerd "$ENG/containerd.sock" \
        > "$OUT/dockerd.log" 2>&1 < /dev/null &
    export DOCKER_HOST=unix://$ENG/docker.sock
    trap h200_engine_down EXIT
    local up=0
    for _ in $(seq 120); do docker version >/dev/null 2>&1 && up=1 && break; sleep 0.5; done
    if [ "$up" != 1 ]; then tail -30 "$OUT/dockerd.log"; return 1; fi
    docker version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}'

    if [ -z "${NO_GPU:-}" ]; then
        echo "== CDI spec $CDI_DIR/nvidia.yaml"
        "$PY" tests/gpu/write_cdi_spec.py "$CDI_DIR/nvidia.yaml" || return 1
        cat "$CDI_DIR/nvidia.yaml"
    fi
}

h200_engine_down() {
    [ -f "$ENG/docker.pid" ] && kill "$(cat "$ENG/docker.pid")" 2>/dev/null
    sleep 3
    kill "$(cat "$ENG/containerd.pid")" 2>/dev/null
}
