// A stateful C library for ctypes: a static counter, a table of function
// pointers (entries of the wasm function table, relocated when the side
// module loads) and a string copied into memory from the main module's
// malloc.
#include <stdlib.h>
#include <string.h>

static int count;
static int add(int a, int b) { return a + b; }
static int mul(int a, int b) { return a * b; }
static int (*ops[])(int, int) = {add, mul};
static char *saved;

int counter_next(void) { return ++count; }
int counter_apply(int op, int a, int b) { return ops[op & 1](a, b); }
int counter_save(const char *s) {
  free(saved);
  saved = malloc(strlen(s) + 1);
  strcpy(saved, s);
  return (int)strlen(saved);
}
const char *counter_saved(void) { return saved ? saved : ""; }
