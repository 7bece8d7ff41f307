/* Links launch_at_load.c's library, whose constructor launches; exits 0 once it has. */
extern int launched_at_load;

int main(void) {
  return launched_at_load ? 0 : 1;
}
