// -g keeps debug info in the shipped members; without it tc-cc still uses
// line tables for its diagnostics but ships none.
// RUN: tc-cc --name=dbg -g --target=x86_64-unknown-linux-gnu -emit-llvm -S %s -o %t.g.ll
// RUN: FileCheck %s --check-prefix=G < %t.g.ll
// G: define {{.*}}@dbg_main({{.*}} !dbg
// G: !DICompileUnit(
// RUN: tc-cc --name=dbg --target=x86_64-unknown-linux-gnu -emit-llvm -S %s -o %t.ll
// RUN: FileCheck %s --check-prefix=NOG --implicit-check-not=!dbg --implicit-check-not=DICompileUnit < %t.ll
// NOG: define {{.*}}@dbg_main(
#include <tc/ifunc.h>
TC_IFUNC(dbg)
void dbg_main(void *p, size_t n, void *t) { *(size_t *)t += n; }
size_t dbg_payload_bound(void *a, size_t n) { return 0; }
int dbg_payload_init(void *a, size_t n, void *p, size_t *s) { *s = 0; return 0; }
