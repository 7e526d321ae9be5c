/* A process that says where two of its functions are and waits: the
 * symbolizer's tests resolve those addresses in it, from its symbols,
 * without them (stripped), and from a separate debug file. */
#include <stdio.h>
#include <unistd.h>

static __attribute__((noinline)) unsigned long local_burn(unsigned long n)
{
	unsigned long x = n | 1;
	for (unsigned long i = 0; i < n; i++)
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return x;
}

__attribute__((noinline, visibility("default"))) unsigned long exported_burn(unsigned long n)
{
	return local_burn(n) + 1;
}

int main(void)
{
	printf("%lx %lx\n", (unsigned long)&local_burn, (unsigned long)&exported_burn);
	fflush(stdout);
	exported_burn(1);
	pause();
	return 0;
}
