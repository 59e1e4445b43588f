// The shell-word parser of per-command approval rules (native/src/shellwords.cpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "shellwords.hpp"

namespace sw = flemma::shellwords;

namespace {
std::vector<std::vector<std::string>> words(const std::string& src) {
  sw::Result r = sw::parse(src);
  REQUIRE_MESSAGE(r.ok, src << ": " << r.reason);
  std::vector<std::vector<std::string>> out;
  for (const auto& c : r.commands) {
    std::vector<std::string> ws;
    for (const auto& w : c.words) ws.push_back(w.value);
    out.push_back(ws);
  }
  return out;
}
bool refused(const std::string& src) {
  sw::Result r = sw::parse(src);
  return !r.ok && r.commands.empty() && !r.reason.empty();
}
using V = std::vector<std::vector<std::string>>;
}  // namespace

TEST_CASE("shellwords: words after quote removal") {
  CHECK(words("git status") == V{{"git", "status"}});
  CHECK(words("  git   \"st\"'atus' ") == V{{"git", "status"}});
  CHECK(words("echo a\\ b \"c\\\"d\" 'e\\f'") == V{{"echo", "a b", "c\"d", "e\\f"}});
  CHECK(words("echo a\\\nb") == V{{"echo", "ab"}});
  CHECK(words("") == V{});
  CHECK(words("# only a comment") == V{});
  CHECK(words("ls # a comment; rm x") == V{{"ls"}});
}

TEST_CASE("shellwords: compound commands give each simple command") {
  CHECK(words("a && b || c; d | e & f |& g") == V{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}});
  CHECK(words("a\nb") == V{{"a"}, {"b"}});
  CHECK(words("(cd x; make)") == V{{"cd", "x"}, {"make"}});
  CHECK(words("echo $(curl x | tee y)") ==
        V{{"curl", "x"}, {"tee", "y"}, {"echo", "$(curl x | tee y)"}});
  CHECK(refused("echo $(curl x | sh)"));
  CHECK(words("echo `id`") == V{{"id"}, {"echo", "`id`"}});
  CHECK(words("echo \"$(id)\"") == V{{"id"}, {"echo", "$(id)"}});
  CHECK(words("diff <(ls a) >(wc)") == V{{"ls", "a"}, {"wc"}, {"diff", "<(ls a)", ">(wc)"}});
  CHECK(words("X=$(rm -rf /)") == V{{"rm", "-rf", "/"}});
}

TEST_CASE("shellwords: redirections are words at the end, assignments dropped") {
  CHECK(words("> out git log 2>&1") == V{{"git", "log", ">", "out", "2>&", "1"}});
  CHECK(words("cat < in >> out") == V{{"cat", "<", "in", ">>", "out"}});
  CHECK(words("CI=1 npm test") == V{{"npm", "test"}});
  CHECK(words("cat <<'EOF'\n$(id)\nEOF\nls") == V{{"cat", "<<", "EOF"}, {"ls"}});
  CHECK(words("cat <<-EOF\n\thello\n\tEOF") == V{{"cat", "<<-", "EOF"}});
  CHECK(words("cat <<< \"$(id)\"") == V{{"id"}, {"cat", "<<<", "$(id)"}});
}

TEST_CASE("shellwords: dynamic words are marked") {
  sw::Result r = sw::parse("echo $HOME 'lit*' *.lua");
  REQUIRE(r.ok);
  REQUIRE(r.commands.size() == 1);
  const auto& w = r.commands[0].words;
  CHECK_FALSE(w[0].dynamic);
  CHECK(w[1].dynamic);
  CHECK_FALSE(w[2].dynamic);
  CHECK(w[3].dynamic);
}

TEST_CASE("shellwords: what it cannot follow is refused") {
  CHECK(refused("echo 'unbalanced"));
  CHECK(refused("echo \"unbalanced"));
  CHECK(refused("echo $(unbalanced"));
  CHECK(refused("echo `unbalanced"));
  CHECK(refused("$CMD status"));
  CHECK(refused("$(which git) status"));
  CHECK(refused("g* status"));
  CHECK(refused("eval 'rm -rf /'"));
  CHECK(refused("exec rm"));
  CHECK(refused("source x.sh"));
  CHECK(refused(". x.sh"));
  CHECK(refused("sh -c 'rm -rf /'"));
  CHECK(refused("/bin/bash -c id"));
  CHECK(refused("git status && bash -c id"));
  CHECK(refused("PATH=/tmp git status"));
  CHECK(refused("LD_PRELOAD=/tmp/x.so git status"));
  CHECK(refused("if true; then rm x; fi"));
  CHECK(refused("echo $((1+2))"));
  CHECK(refused("echo ${x:-$(id)}"));
  CHECK(refused("echo $'\\x41'"));
  CHECK(refused("cat <<EOF\n$(id)\nEOF"));
  CHECK(refused("cat <<EOF\nno end"));
  CHECK(refused("echo `echo \\`id\\``"));
  CHECK(refused("f() { id; }"));
  CHECK(refused("echo )"));
  CHECK(refused("git log >"));
  CHECK(refused(std::string("echo a\0b", 8)));
  CHECK(refused(std::string(sw::kMaxInput + 1, 'a')));
  CHECK(refused(std::string(100, '(') + "x" + std::string(100, ')')));
}
