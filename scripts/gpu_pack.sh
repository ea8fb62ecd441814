#!/usr/bin/env bash
# The GPU-run pack: one git-ignored folder holding everything a run on the lent GPU machine
# needs (no Rust, no network there, at most 64 MiB sent along), and nothing it would compile:
#
#   scripts/gpu_pack.sh [--out DIR] [--no-build] [--cap BYTES]   build it (default DIR: gpu-pack/)
#   scripts/gpu_pack.sh --check DIR [--cap BYTES]                 verify an existing pack
#
# Contents: linattn (release build, stripped); nvrtc-cache-sm_90.tgz (the on-disk NVRTC cache
# of every kernel variant for sm_90, the H100's and H200's arch, the only ones lent, so the
# binary compiles nothing on the GPU);
# gpu_run.sh (the one command to run there), this script (for --check there), peers.py with
# peer_impls.py and peer_timing.py, gpu_summary.py; the pinned fla wheel when it could be
# downloaded; MANIFEST (what each file is, its size and sha256, the commit, the date).
# The whole pack must stay under --cap (default 48000000 bytes), and the pack with the
# repository's tracked files (which travel too: 30 MB on 2026-11-27, 12 MB a day before,
# each H100 run's results adding ~9 MB) under the device tool's 64 MiB less 2 MB of margin
# for untracked files: a build that would not travel fails here, naming both sizes. (The
# sm_80 cache, 14 MB, was dropped on 2026-11-27 when the two together reached 72 MB.)
set -euo pipefail

CAP=48000000
FLA_SPEC="fla-core==0.6.0"
FLA_WHEEL="fla_core-0.6.0-py3-none-any.whl"
ARCHS=(sm_90)
# The device tool's limit on what travels, and the margin kept for untracked files.
TRAVEL_LIMIT=67108864
TRAVEL_MARGIN=2000000
# Files every pack holds (the fla wheel is optional: MANIFEST says whether it is in).
REQUIRED=(linattn nvrtc-cache-sm_90.tgz gpu_run.sh gpu_pack.sh
    peers.py peer_impls.py peer_timing.py gpu_summary.py)
SCRIPTS=(gpu_run.sh gpu_pack.sh peers.py peer_impls.py peer_timing.py gpu_summary.py)

die() {
    echo "gpu_pack: error: $*" >&2
    exit 1
}
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }

# check_pack DIR: every expected file present, sizes and sha256 as MANIFEST says, nothing
# unlisted, the total under the cap. Reports every problem, then returns 1 if there was one.
check_pack() {
    local dir=$1 problems=() name bytes sum what actual listed=" " total=0
    [ -d "$dir" ] || die "--check $dir: no such directory"
    if [ ! -f "$dir/MANIFEST" ]; then
        echo "gpu_pack: $dir is not a pack: missing MANIFEST" >&2
        return 1
    fi
    while IFS=$'\t' read -r name bytes sum what; do
        listed+="$name "
        if [ ! -f "$dir/$name" ]; then
            problems+=("missing: $name ($what)")
            continue
        fi
        actual=$(stat -c %s "$dir/$name")
        if [ "$actual" != "$bytes" ]; then
            problems+=("size: $name is $actual bytes, MANIFEST says $bytes")
        elif [ "$(sha256sum "$dir/$name" | cut -d' ' -f1)" != "$sum" ]; then
            problems+=("sha256: $name differs from MANIFEST")
        fi
    done < <(sed -n '/^files:$/,$p' "$dir/MANIFEST" | tail -n +2)
    for name in "${REQUIRED[@]}"; do
        case "$listed" in
            *" $name "*) ;;
            *) [ -f "$dir/$name" ] && problems+=("unlisted: $name is not in MANIFEST") ||
                problems+=("missing: $name (not in MANIFEST either)") ;;
        esac
    done
    for path in "$dir"/* "$dir"/.[!.]*; do
        [ -e "$path" ] || continue
        name=${path##*/}
        total=$((total + $(stat -c %s "$path")))
        [ "$name" = MANIFEST ] && continue
        case "$listed" in
            *" $name "*) ;;
            *) problems+=("unexpected: $name is not in MANIFEST") ;;
        esac
    done
    if [ -f "$dir/linattn" ] && [ ! -x "$dir/linattn" ]; then
        problems+=("linattn is not executable")
    fi
    if [ "$total" -gt "$CAP" ]; then
        problems+=("size: the pack holds $total bytes, over the cap of $CAP")
    fi
    if [ "${#problems[@]}" -gt 0 ]; then
        echo "gpu_pack: $dir fails its check:" >&2
        printf '  %s\n' "${problems[@]}" >&2
        return 1
    fi
    echo "gpu_pack: $dir OK: $(find "$dir" -mindepth 1 -maxdepth 1 | wc -l) files, $total bytes (cap $CAP), $(grep '^commit:' "$dir/MANIFEST")"
}

mode=build out="" build=1
while [ $# -gt 0 ]; do
    case "$1" in
        --check)
            mode=check
            out=${2:?--check needs a directory}
            shift 2
            ;;
        --out)
            out=${2:?--out needs a directory}
            shift 2
            ;;
        --no-build)
            build=0
            shift
            ;;
        --cap)
            CAP=${2:?--cap needs a number of bytes}
            [[ $CAP =~ ^[0-9]+$ ]] || die "--cap $CAP: give a number of bytes"
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

if [ "$mode" = check ]; then
    check_pack "$out"
    exit $?
fi

# ---- build ------------------------------------------------------------------------------
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$root/Cargo.toml" ] || die "run from a linattn checkout (no Cargo.toml in $root)"
out=${out:-$root/gpu-pack}
target=${CARGO_TARGET_DIR:-$root/target}
bin=$target/release/linattn
started=$SECONDS
log() { printf '[%3d s] %s\n' "$((SECONDS - started))" "$*"; }

if [ -e "$out" ] && [ ! -f "$out/MANIFEST" ] && [ -n "$(ls -A "$out")" ]; then
    die "--out $out exists and is not a pack (no MANIFEST): not replacing it"
fi
if [ "$build" = 1 ]; then
    log "cargo build --release --bin linattn"
    (cd "$root" && cargo build --release --bin linattn)
fi
[ -x "$bin" ] || die "no binary at $bin (build it, or drop --no-build)"

# The pack's cache must hold what the binary's embedded kernels compile to: kernel files
# read from LINATTN_KERNEL_DIR would key different entries, and LINATTN_NVRTC_CACHE=0
# would write none.
[ -z "${LINATTN_KERNEL_DIR:-}" ] || die "LINATTN_KERNEL_DIR is set: unset it (the GPU runs the embedded kernels)"
unset LINATTN_NVRTC_CACHE
if [ -d "$root/.nvrtc/nvidia/cu13/lib" ]; then
    export LD_LIBRARY_PATH="$root/.nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
shared_cache=${LINATTN_CACHE_DIR:-$target/linattn-nvrtc-cache}
unset LINATTN_CACHE_DIR

stage="$out.tmp-$$"
work=$(mktemp -d "$target/gpu-pack-cache.XXXXXX")
trap 'rm -rf "$stage" "$work"' EXIT
mkdir -p "$stage"

log "strip the binary ($(stat -c %s "$bin") bytes)"
objcopy --strip-all "$bin" "$stage/linattn"
"$stage/linattn" --version >/dev/null || die "the stripped binary does not run"

# kernels_into DIR LOG: compile every variant for every arch with DIR as the disk cache.
kernels_into() {
    local arch_list
    arch_list=$(IFS=,; echo "${ARCHS[*]}")
    if ! LINATTN_CACHE_DIR=$1 "$bin" kernels --arch "$arch_list" >"$2" 2>&1; then
        tail -n 20 "$2" >&2
        die "linattn kernels failed (a variant that does not compile, or a hot kernel that spills): see above"
    fi
}

# Fill the shared cache first (hits when tests or `just kernels` ran; compiles otherwise).
log "linattn kernels --arch $(IFS=,; echo "${ARCHS[*]}") into $shared_cache"
kernels_into "$shared_cache" "$work/kernels-shared.log"
counts=$(sed -n 's/^\([0-9]*\) variants x \([0-9]*\) archs compiled.*/\1 \2/p' "$work/kernels-shared.log")
read -r variants archs <<<"$counts" || true
[ -n "${archs:-}" ] || die "no 'N variants x M archs compiled' line in linattn kernels' output"
expected=$((variants * archs))
# Then pick out the entries the binary reads: hard links of the shared cache in a scratch
# dir, access times set to 1970, a second (all-hit) run; what it read has a fresh atime.
# The shared cache also holds entries of older kernels, which must not go into the pack.
mkdir "$work/c"
for f in "$shared_cache"/*; do
    [ -f "$f" ] || continue
    ln "$f" "$work/c/" 2>/dev/null || cp "$f" "$work/c/"
done
touch -a -d @0 "$work/c"/* 2>/dev/null || true
touch -d @1000 "$work/marker"
kernels_into "$work/c" "$work/kernels-pick.log"
mapfile -t used < <(cd "$work/c" && find . -maxdepth 1 -type f -anewer ../marker -name '*-sm_*' -printf '%f\n' | sort)
if [ "${#used[@]}" -ne "$expected" ]; then
    # No atime updates here (a noatime mount): compile every variant into an empty cache.
    log "access times not usable (${#used[@]} entries read, $expected expected): compiling all $expected into an empty cache (~2 min on 2 cores)"
    rm -rf "$work/c" && mkdir "$work/c"
    kernels_into "$work/c" "$work/kernels-fresh.log"
    mapfile -t used < <(cd "$work/c" && find . -maxdepth 1 -type f -name '*-sm_*' -printf '%f\n' | sort)
    [ "${#used[@]}" -eq "$expected" ] || die "the fresh cache holds ${#used[@]} entries, linattn kernels named $expected"
fi
cache_note=""
for arch in "${ARCHS[@]}"; do
    printf '%s\n' "${used[@]}" | grep -- "-$arch-" >"$work/list-$arch" || true
    n=$(wc -l <"$work/list-$arch")
    [ "$n" -eq "$variants" ] || die "$n cache entries for $arch, $variants variants expected"
    raw=$(cd "$work/c" && xargs stat -c %s <"$work/list-$arch" | awk '{s += $1} END {print s + 0}')
    tar -C "$work/c" -cf - --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
        -T "$work/list-$arch" | gzip -n >"$stage/nvrtc-cache-$arch.tgz"
    cache_note+="$arch $n entries $raw bytes raw -> $(stat -c %s "$stage/nvrtc-cache-$arch.tgz") gzipped; "
    log "nvrtc cache $arch: $n entries, $raw bytes raw, $(stat -c %s "$stage/nvrtc-cache-$arch.tgz") gzipped"
done

for s in "${SCRIPTS[@]}"; do
    install -m "$(case $s in *.sh | peers.py | gpu_summary.py) echo 755 ;; *) echo 644 ;; esac)" \
        "$root/scripts/$s" "$stage/$s"
done

# The fla wheel, kept in target/ so repeated packs (and offline ones) do not download again.
wheels=$target/gpu-pack-wheels
fla_note="not included"
if [ ! -f "$wheels/$FLA_WHEEL" ]; then
    log "pip download $FLA_SPEC"
    mkdir -p "$wheels"
    if ! timeout 120 python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --dest "$wheels" "$FLA_SPEC" >"$work/pip.log" 2>&1; then
        echo "gpu_pack: warning: could not download $FLA_SPEC ($(tail -n 1 "$work/pip.log")); the pack goes on without it and the peers step will report fla unavailable" >&2
        fla_note="not included: download failed"
    fi
fi
if [ -f "$wheels/$FLA_WHEEL" ]; then
    cp "$wheels/$FLA_WHEEL" "$stage/"
    fla_note="included ($FLA_SPEC)"
fi

commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit+="-dirty"
fi
describe() {
    case "$1" in
        linattn) if [ "$build" = 1 ]; then echo "linattn release binary, stripped, built from $commit"; else
            echo "linattn release binary, stripped, as found in $target/release (--no-build: built from $commit only if that build was current)"; fi ;;
        nvrtc-cache-*.tgz) local a=${1#nvrtc-cache-} && echo "NVRTC disk cache of every kernel variant for ${a%.tgz} (unpack into \$LINATTN_CACHE_DIR)" ;;
        gpu_run.sh) echo "the one command for the GPU machine (DRY_RUN=1 to see its plan)" ;;
        gpu_pack.sh) echo "this pack's builder; --check DIR verifies the pack" ;;
        peers.py) echo "times fla and PyTorch SDPA at linattn's shapes, one process for all shapes" ;;
        peer_impls.py) echo "the peers peers.py times" ;;
        peer_timing.py) echo "peers.py's clocks and sampling" ;;
        gpu_summary.py) echo "ratio table (linattn vs fla) and check verdict from the results JSON" ;;
        *.whl) echo "pinned $FLA_SPEC wheel, installed with pip --no-index --target on the GPU machine" ;;
        *) echo "?" ;;
    esac
}
{
    echo "# linattn GPU pack: what a run on the GPU machine needs; nothing there is compiled."
    echo "# Verify: gpu_pack.sh --check DIR. Run: OUT=/dir BUDGET=480 DIR/gpu_run.sh"
    echo "commit: $commit"
    echo "binary: $("$stage/linattn" --version 2>&1 | head -n 1)"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nvrtc-cache: ${cache_note%; }"
    echo "fla-wheel: $fla_note"
    echo "cap-bytes: $CAP"
    echo "files:"
    for path in "$stage"/*; do
        name=${path##*/}
        [ "$name" = MANIFEST ] && continue
        printf '%s\t%s\t%s\t%s\n' "$name" "$(stat -c %s "$path")" \
            "$(sha256sum "$path" | cut -d' ' -f1)" "$(describe "$name")"
    done
} >"$stage/MANIFEST"

total=$(cat "$stage"/* | wc -c)
if [ "$total" -gt "$CAP" ]; then
    echo "gpu_pack: error: the pack would hold $total bytes, over the cap of $CAP; largest files:" >&2
    (cd "$stage" && stat -c '%s %n' -- * | sort -rn | head -n 5 | awk '{printf "  %10d  %s\n", $1, $2}') >&2
    exit 1
fi
tracked=$(git -C "$root" ls-files -z 2>/dev/null | (cd "$root" && xargs -0 -r stat -c %s 2>/dev/null) |
    awk '{s += $1} END {print s + 0}')
if [ $((total + tracked)) -gt $((TRAVEL_LIMIT - TRAVEL_MARGIN)) ]; then
    die "the pack ($total bytes) and the repository's tracked files ($tracked bytes) come to $((total + tracked)) bytes, over the $TRAVEL_LIMIT the device tool carries less a $TRAVEL_MARGIN-byte margin: move results out of the repository or shrink the pack"
fi
rm -rf "$out"
mv "$stage" "$out"
check_pack "$out" >/dev/null || die "the pack just built fails its own check"
log "pack written to $out: $total bytes (cap $CAP; with the $tracked tracked bytes $((total + tracked)) of the $TRAVEL_LIMIT that travel), commit $commit"
(cd "$out" && stat -c '%s %n' -- * | sort -rn | awk '{printf "  %10d  %s\n", $1, $2}')
