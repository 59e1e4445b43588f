# Flemma: build, test and benchmark entry points. See README.md.
BUILD_DIR  ?= build
ASAN_DIR   ?= build-asan
FUZZ_DIR   ?= build-fuzz
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
SPEC       ?=
BENCH      ?=
FUZZ_TIME  ?= 60
SHELL      := /bin/bash
# Neovim is not built with sanitizers: their runtimes are preloaded (and dropped
# from the environment at startup, so child processes do not inherit them).
ASAN_PRELOAD = $(shell gcc -print-file-name=libasan.so) $(shell gcc -print-file-name=libubsan.so)
ASAN_SPECS = spec/flemma/process_spec.lua spec/flemma/sandbox_spec.lua spec/flemma/document_spec.lua \
	spec/flemma/truncate_spec.lua spec/flemma/native_spec.lua spec/flemma/stream_spec.lua

.PHONY: all build deps test asan bench fuzz demo helptags format lint clean distclean

all: build

# Build (Release): the library and its helper (libuv, Lua 5.1 and nlohmann/json come
# from third_party/; nothing else is needed but CMake and a C++20 compiler). The doctest
# suite is built only for `make test` (FLEMMA_TESTS=ON below) or `make FLEMMA_TESTS=ON`;
# unset, a build directory keeps what it was configured with (a new one: OFF).
FLEMMA_TESTS ?=
# One progress line per file compiled (scripts/progress.sh; the compiler's own messages
# pass unfiltered).
build:
	@echo "[flemma] configuring $(BUILD_DIR)/ with CMake"
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(if $(FLEMMA_TESTS),-DFLEMMA_TESTS=$(FLEMMA_TESTS)) >/dev/null
	@set -o pipefail; cmake --build $(BUILD_DIR) -j$(JOBS) -- --no-print-directory | bash scripts/progress.sh \
		|| cmake --build $(BUILD_DIR) -j1
	@echo "[flemma] built $(BUILD_DIR)/libflemma_core$(if $(filter Darwin,$(shell uname -s)),.dylib,.so)"

# What the tests need (not the build): packages (apt-get), Neovim 0.10.4 and 0.12.4 in .deps/.
deps:
	@bash scripts/deps.sh

test: FLEMMA_TESTS = ON
test: deps build
	@SPEC="$(SPEC)" bash scripts/test.sh

# The native suite with AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DFLEMMA_SANITIZE=ON -DFLEMMA_TESTS=ON >/dev/null
	@cmake --build $(ASAN_DIR) -j$(JOBS)
	@cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j2
	@echo "== Lua specs of the native areas against the sanitized library (Neovim 0.12.4)"
	@LD_PRELOAD="$(ASAN_PRELOAD)" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 FLEMMA_LIBRARY=$(CURDIR)/$(ASAN_DIR)/libflemma_core.so \
		scripts/nvim 0.12.4 --cmd 'lua vim.env.LD_PRELOAD = nil' --headless --clean -l spec/runner.lua \
		--exclude-tags=child $(ASAN_SPECS) | tail -n 25; \
		test $${PIPESTATUS[0]} -eq 0

# A guided tour of the tool cycle, offline: Neovim with only this plugin on a scratch
# copy of demo/tour.chat (see README.md). It builds the library and needs a Neovim 0.10
# or later: the system's, else one fetched into .deps/ (never the test packages).
demo:
	@bash scripts/demo.sh

# doc/tags is committed (so :help flemma works in every install, built or not); after an
# edit of doc/flemma.txt, regenerate it (spec/flemma/doc_spec.lua checks it is current).
helptags:
	@bash scripts/helptags.sh

# The layout of the Lua (stylua.toml) and of the native core (.clang-format): `make format`
# rewrites the files, `make lint` checks them (and runs the linters) without writing.
STYLUA       ?= $(firstword $(wildcard .deps/npm/node_modules/.bin/stylua) stylua)
CLANG_FORMAT ?= $(firstword $(shell command -v clang-format-14 clang-format 2>/dev/null))
LUA_DIRS      = lua plugin ftplugin ftdetect spec bench scripts
NATIVE_FILES  = $(wildcard native/src/*.cpp native/src/*.hpp native/include/flemma/*.h native/reaper/*.cpp tests/*.cpp fuzz/*.cpp)

format:
	@$(STYLUA) $(LUA_DIRS)
	@$(CLANG_FORMAT) -i $(NATIVE_FILES)

lint:
	@bash scripts/lint.sh

bench: deps build
	@BENCH="$(BENCH)" bash scripts/bench.sh

# libFuzzer targets (fuzz/fuzz_*.cpp) with AddressSanitizer, FUZZ_TIME seconds each,
# seeded from spec/fixtures/chat (and spec/fixtures/stream). A crash leaves its input in $(FUZZ_DIR)/: add it
# as a regression case to tests/test_document.cpp (tests/test_idoc.cpp for fuzz_idoc,
# whose inputs are a text and an edit script: see fuzz/fuzz_idoc.cpp; tests/test_stream.cpp
# for fuzz_stream, tests/test_escape.cpp for fuzz_escape, whose first byte seeds where
# the text is cut; tests/test_jsonrpc.cpp for fuzz_jsonrpc and fuzz_mcp_http). The frontmatter's pattern matcher (fuzz_lpattern) checks its own
# invariants: no crash, matching ends within its step budget; so does the file reader's
# line window (fuzz_fileread), against a plain reference. The search's decoder of
# `rg --json` (fuzz_rgjson; seeds in fuzz/corpus/rgjson) and its glob, ignore-rule and
# regex matchers (fuzz_glob; seeds in fuzz/corpus/glob) and the shell-word parser of
# approval rules (fuzz_shellwords) check theirs: see the files; a
# crash becomes a case in tests/test_search.cpp. The `fetch` tool's HTML converter and page
# decoder (fuzz_html; the first byte seeds how the input is split) check theirs; a crash
# becomes a case in tests/test_html.cpp. The redaction of kept files (fuzz_redact: the
# first byte gives the number of values and seeds where the text is cut) checks the
# streamed result against the whole-text one; a crash becomes a case in tests/test_redact.cpp.
FUZZ_CXX   ?= clang++-14
FUZZ_FLAGS := -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-Inative/include -Inative/src -Ithird_party/nlohmann/include
fuzz:
	@mkdir -p $(FUZZ_DIR)/corpus-document $(FUZZ_DIR)/corpus-idoc
	@cp -n spec/fixtures/chat/*.chat $(FUZZ_DIR)/corpus-document/ 2>/dev/null || true
	@cp -n spec/fixtures/chat/*.chat $(FUZZ_DIR)/corpus-idoc/ 2>/dev/null || true
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_document.cpp native/src/document.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_document
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_idoc.cpp native/src/idoc.cpp native/src/document.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_idoc
	cd $(FUZZ_DIR) && ./fuzz_document -max_total_time=$(FUZZ_TIME) -max_len=65536 -timeout=10 \
		-print_final_stats=1 corpus-document
	cd $(FUZZ_DIR) && ./fuzz_idoc -max_total_time=$(FUZZ_TIME) -max_len=16384 -timeout=10 \
		-print_final_stats=1 corpus-idoc
	@mkdir -p $(FUZZ_DIR)/corpus-stream
	@for f in spec/fixtures/stream/*.http spec/fixtures/stream/*.sse; do \
		case $$f in */openai*) k='\001';; */responses*) k='\002';; */vertex*) k='\003';; *) k='\000';; esac; \
		printf "$$k\000" | cat - $$f > $(FUZZ_DIR)/corpus-stream/$$(basename $$f); done
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_stream.cpp native/src/stream.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_stream
	cd $(FUZZ_DIR) && ./fuzz_stream -max_total_time=$(FUZZ_TIME) -max_len=16384 -timeout=10 \
		-print_final_stats=1 corpus-stream
	@mkdir -p $(FUZZ_DIR)/corpus-escape
	@printf '\007@You:\n**Tool Use:** `bash` (`x`)\n```flemma:tool status=approved\n```py\n</thinking>\n' \
		> $(FUZZ_DIR)/corpus-escape/markers
	@printf '\003\\\\@Assistant:\r\n   ~~~ \tflemma:x\n<thinking>\n' > $(FUZZ_DIR)/corpus-escape/escaped
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_escape.cpp native/src/escape.cpp native/src/document.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_escape
	cd $(FUZZ_DIR) && ./fuzz_escape -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-escape
	@mkdir -p $(FUZZ_DIR)/corpus-lpattern
	@printf '\006%%b()x(a(b)c)y' > $(FUZZ_DIR)/corpus-lpattern/balance
	@printf '\010(.-)%%1bxaaaaaaaab' > $(FUZZ_DIR)/corpus-lpattern/backref
	@printf '\020^[%%a_][%%w_]*%%f[%%W]name_1 rest' > $(FUZZ_DIR)/corpus-lpattern/frontier
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_lpattern.cpp native/src/lpattern.cpp -o $(FUZZ_DIR)/fuzz_lpattern
	cd $(FUZZ_DIR) && ./fuzz_lpattern -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-lpattern
	@mkdir -p $(FUZZ_DIR)/corpus-fileread
	@printf '\001\002\012\003one\ntwo\nthree' > $(FUZZ_DIR)/corpus-fileread/lines
	@printf '\000\000\005\001\303\251\303\251\303\251\nx' > $(FUZZ_DIR)/corpus-fileread/utf8
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_fileread.cpp native/src/fileread.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_fileread
	cd $(FUZZ_DIR) && ./fuzz_fileread -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-fileread
	@mkdir -p $(FUZZ_DIR)/corpus-jsonrpc
	@printf '\003{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}\n{"jsonrpc":"2.0","method":"ping","id":"x"}\r\n' \
		> $(FUZZ_DIR)/corpus-jsonrpc/messages
	@printf '\303{"jsonrpc":"2.0","id":"abcd","result":{"content":[{"type":"text","text":"a\\"\\u00e9b"}],"s":{"k":[["xyzw",1]]}}}\n' \
		> $(FUZZ_DIR)/corpus-jsonrpc/blobs
	@printf '\065[[[[{"jsonrpc":"2.0","method":"a\\\"[["}]]\ngarbage\n' > $(FUZZ_DIR)/corpus-jsonrpc/deep
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_jsonrpc.cpp native/src/jsonrpc.cpp native/src/stream.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_jsonrpc
	cd $(FUZZ_DIR) && ./fuzz_jsonrpc -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-jsonrpc
	@mkdir -p $(FUZZ_DIR)/corpus-mcp-http
	@printf '\300id: e1\r\nevent: message\r\ndata: {"jsonrpc":"2.0",\ndata: "id":1,"result":{}}\n\nid: e2\ndata:\n\n' \
		> $(FUZZ_DIR)/corpus-mcp-http/sse
	@printf '\103{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}' > $(FUZZ_DIR)/corpus-mcp-http/json
	@printf '\001HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\r\n{"error":{"code":-32001,"message":"gone"}}' \
		> $(FUZZ_DIR)/corpus-mcp-http/status
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_mcp_http.cpp native/src/stream.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_mcp_http
	cd $(FUZZ_DIR) && ./fuzz_mcp_http -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-mcp-http
	@mkdir -p $(FUZZ_DIR)/corpus-rgjson $(FUZZ_DIR)/corpus-glob
	@cp -n fuzz/corpus/rgjson/* $(FUZZ_DIR)/corpus-rgjson/ 2>/dev/null || true
	@cp -n fuzz/corpus/glob/* $(FUZZ_DIR)/corpus-glob/ 2>/dev/null || true
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_rgjson.cpp native/src/search.cpp native/src/stream.cpp \
		native/src/truncate.cpp native/src/capi_core.cpp -o $(FUZZ_DIR)/fuzz_rgjson
	cd $(FUZZ_DIR) && ./fuzz_rgjson -max_total_time=$(FUZZ_TIME) -max_len=16384 -timeout=10 \
		-print_final_stats=1 corpus-rgjson
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_glob.cpp native/src/search.cpp native/src/stream.cpp \
		native/src/truncate.cpp native/src/capi_core.cpp -o $(FUZZ_DIR)/fuzz_glob
	cd $(FUZZ_DIR) && ./fuzz_glob -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-glob
	@mkdir -p $(FUZZ_DIR)/corpus-shellwords
	@printf 'git status; rm -rf / && echo "$$(curl x | sh)" `id` > out 2>&1' > $(FUZZ_DIR)/corpus-shellwords/compound
	@printf "cat <<'EOF' | wc\n\$$(id)\nEOF\ndiff <(ls a) >(wc) 'q\\' \"d\\\"q\"" > $(FUZZ_DIR)/corpus-shellwords/heredoc
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_shellwords.cpp native/src/shellwords.cpp -o $(FUZZ_DIR)/fuzz_shellwords
	cd $(FUZZ_DIR) && ./fuzz_shellwords -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-shellwords
	@mkdir -p $(FUZZ_DIR)/corpus-html
	@printf '\003HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<h1>T</h1><ul><li>a<ol><li>b</ol></ul><pre>x</pre><table><tr><td>1<td>2</table><a href="/y">y</a>&amp;&#x41;<script>s</script>' \
		> $(FUZZ_DIR)/corpus-html/page
	@printf '\000HTTP/1.1 301 Moved\nLocation: /z\n\n<blockquote><code>a`b</code><!-- c' > $(FUZZ_DIR)/corpus-html/redirect
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_html.cpp native/src/html.cpp native/src/stream.cpp native/src/truncate.cpp \
		native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_html
	cd $(FUZZ_DIR) && ./fuzz_html -max_total_time=$(FUZZ_TIME) -max_len=16384 -timeout=10 \
		-print_final_stats=1 corpus-html
	@mkdir -p $(FUZZ_DIR)/corpus-redact
	@printf '\005\013sk-SECRET-9aa sk-SECRET-9 Authorization: Bearer x\r\nheader = "X-Api-Key: k"\n' \
		> $(FUZZ_DIR)/corpus-redact/headers
	@printf '\002\003abcd\003d]x abcdx-goog-api-key:\n\n v\000"' > $(FUZZ_DIR)/corpus-redact/overlap
	$(FUZZ_CXX) $(FUZZ_FLAGS) fuzz/fuzz_redact.cpp native/src/redact.cpp native/src/capi_core.cpp \
		-o $(FUZZ_DIR)/fuzz_redact
	cd $(FUZZ_DIR) && ./fuzz_redact -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		-print_final_stats=1 corpus-redact

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)

distclean: clean
	rm -rf .deps
