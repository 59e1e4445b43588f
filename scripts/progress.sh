#!/usr/bin/env bash
# Reads `cmake --build` output and prints one line per file compiled or linked:
#   [flemma] [ 45%] isolate.cpp
# Line by line as it comes (no buffering: a caller shows the last line as progress).
# CMake colors its lines when it believes it writes to a terminal (make tells it so
# through MAKE_TERMOUT when make's own output is one): the colors are dropped first.
shopt -s extglob
esc=$'\e'
while IFS= read -r line; do
  line=${line//"$esc["*([0-9;])m/}
  case $line in
    \[*%\]\ Building\ *|\[*%\]\ Linking\ *)
      pct=${line%%]*}]
      file=${line##* }
      file=${file##*/}
      file=${file%.o}
      case $line in *"] Linking "*) file="linking $file" ;; esac
      printf '[flemma] %s %s\n' "$pct" "$file"
      ;;
  esac
done
