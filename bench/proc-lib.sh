# Shared by bench scripts that measure what processes cost: source it.

# Clock ticks of user and system time of every running process whose command line contains
# $1 (a directory its configuration or mount point is under).
proc_ticks() {
    local total=0 p f
    for p in $(pgrep -f "$1"); do
        f=$(cut -d')' -f2- "/proc/$p/stat" 2>/dev/null) || continue
        set -- $f
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}

# Minor page faults of every running process whose command line contains $1, as proc_ticks.
proc_minflt() {
    local total=0 p f
    for p in $(pgrep -f "$1"); do
        f=$(cut -d')' -f2- "/proc/$p/stat" 2>/dev/null) || continue
        set -- $f
        total=$((total + ${8}))
    done
    echo "$total"
}
