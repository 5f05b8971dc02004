#!/usr/bin/env bash
# Stands in for ssh in tests of `merak launch --hostfile`: runs the command
# line on this host the way sshd does on another one: through a shell, in a
# clean environment (nothing of the launcher's but PATH and HOME), its stdin
# a pipe that ends when this process's own stdin ends (the launcher went
# away), in the home directory; like ssh, it returns when the command does,
# with its exit status.
# Usage: local_rsh.sh HOST COMMAND
host=$1
shift
[[ -n ${RSH_LOG:-} ]] && echo "$host" >>"$RSH_LOG"
cd "$HOME"  # as sshd does: the launcher's directory must travel with the command
env -i PATH="$PATH" HOME="$HOME" bash -c "$*" < <(cat)
