// A member's metadata kind table holds only the kinds its module attaches
// (here !dbg, !tbaa, !prof and !llvm.loop): LLVM's writer lists all 49 it
// knows, which the target would parse at every load. The kinds dropped go
// into a block the reader skips, so the member keeps its size and offsets.
// The member reads back as the module -emit-llvm writes for the same
// target (use-list order aside), and runs on a target.
// RUN: rm -rf %t && mkdir %t && cd %t
// RUN: tc-cc --name=kinds -g --target=x86_64-unknown-linux-gnu -emit-llvm -S %s -o emitted.ll
// RUN: tc-cc --name=kinds -g --target=x86_64-unknown-linux-gnu %s -o kinds.tcfb
// RUN: tc-ar extract kinds.tcfb --target=x86_64-unknown-linux-gnu -o member.bc
// RUN: llvm-dis member.bc -o member.ll
// RUN: grep -v -e '^; ModuleID' -e '^source_filename' emitted.ll | sed -e 's/ *; preds = .*//' > a.ll
// RUN: grep -v -e '^; ModuleID' -e '^source_filename' member.ll | sed -e 's/ *; preds = .*//' > b.ll
// RUN: diff a.ll b.ll
// RUN: llvm-bcanalyzer -dump member.bc | FileCheck %s --check-prefix=G --implicit-check-not='<KIND '
// G:      <METADATA_KIND_BLOCK
// G-NEXT:   <KIND op0=0 op1=100 op2=98 op3=103/>
// G-NEXT:   <KIND op0=1 op1=116 op2=98 op3=97 op4=97/>
// G-NEXT:   <KIND op0=2 op1=112 op2=114 op3=111 op4=102/>
// G-NEXT:   <KIND op0=18 op1=108 op2=108 op3=118 op4=109 op5=46 op6=108 op7=111 op8=111 op9=112/>
// G-NEXT:   <UnknownBlock120
// G:      </METADATA_KIND_BLOCK>
// Without -g no !dbg, so no kind 0 ("dbg").
// RUN: tc-cc --name=kinds --target=x86_64-unknown-linux-gnu %s -o nog.tcfb
// RUN: tc-ar extract nog.tcfb --target=x86_64-unknown-linux-gnu -o nog.bc
// RUN: llvm-bcanalyzer -dump nog.bc | FileCheck %s --check-prefix=NOG --implicit-check-not='<KIND '
// NOG:      <METADATA_KIND_BLOCK
// NOG-NEXT:   <KIND op0=1 {{.*}}/>
// NOG-NEXT:   <KIND op0=2 {{.*}}/>
// NOG-NEXT:   <KIND op0=18 {{.*}}/>
// NOG-NEXT:   <UnknownBlock120
// No kind at all (-O0: no TBAA): the block holds only the pad block, and
// the member still loads and runs (TSI counts 1).
// RUN: tc-cc -O0 %tc_src/examples/tsi/tsi.c -o o0.tcfb
// RUN: tc-ar extract o0.tcfb --target=x86_64-unknown-linux-gnu -o o0.bc
// RUN: llvm-bcanalyzer -dump o0.bc | FileCheck %s --check-prefix=NONE --implicit-check-not='<KIND '
// NONE:      <METADATA_KIND_BLOCK
// NONE-NEXT:   <UnknownBlock120
// RUN: env UCX_TLS=posix,self,tcp %with_server -- tc-serve --listen 127.0.0.1:0 -- \
// RUN:   'tc-send --to $TC_ADDR o0.tcfb --read-back 8' | FileCheck %s --check-prefix=O0RAN
// O0RAN: 0100000000000000
// Every member of the default targets loads and runs: 45 with no payload.
// RUN: tc-cc --name=kinds %s -o run.tcfb
// RUN: env UCX_TLS=posix,self,tcp %with_server -- tc-serve --listen 127.0.0.1:0 -- \
// RUN:   'tc-send --to $TC_ADDR run.tcfb --read-back 8' | FileCheck %s --check-prefix=RAN
// RAN: 2d00000000000000
#include <tc/ifunc.h>

TC_IFUNC(kinds)

void kinds_main(void *payload, size_t payload_size, void *target_args) {
  const unsigned char *p = (const unsigned char *)payload;
  unsigned long *t = (unsigned long *)target_args;
  unsigned long s = 45;
#pragma clang loop unroll(disable) vectorize(disable)
  for (size_t i = 0; i < payload_size; ++i)
    s += p[i] * *t;
  if (__builtin_expect(s > 1000, 0))
    s = 0;
  *t = s;
}

size_t kinds_payload_bound(void *a, size_t n) {
  (void)a;
  (void)n;
  return 0;
}

int kinds_payload_init(void *a, size_t n, void *p, size_t *s) {
  (void)a;
  (void)n;
  (void)p;
  *s = 0;
  return 0;
}
