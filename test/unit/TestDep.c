/* A shared library only the JIT tests load, as an ifunc's dependency. */
int tc_test_dep_answer(void) { return 42; }
