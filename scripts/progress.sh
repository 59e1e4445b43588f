#!/usr/bin/env bash
# Reads `cmake --build` output and prints one line per file compiled or linked:
#   [flemma] [ 45%] isolate.cpp
# Line by line as it comes (no buffering: a caller shows the last line as progress).
while IFS= read -r line; do
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
