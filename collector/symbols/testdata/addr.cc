// A C++ process that says where a function of a namespace is and waits:
// the symbolizer names it as the source spells it, not as it is mangled.
#include <cstdio>
#include <unistd.h>

namespace shop {
__attribute__((noinline)) unsigned long total(unsigned long n)
{
	unsigned long x = n | 1;
	for (unsigned long i = 0; i < n; i++)
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return x;
}
} // namespace shop

int main()
{
	std::printf("%lx %lx\n", (unsigned long)&shop::total, (unsigned long)&shop::total);
	std::fflush(stdout);
	shop::total(1);
	pause();
	return 0;
}
