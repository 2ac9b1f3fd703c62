//go:build linux && !race

package proxy

import "syscall"

// mapRegion maps n bytes of anonymous memory, which the kernel backs only
// where it is written.
func mapRegion(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func unmapRegion(mem []byte) { _ = syscall.Munmap(mem) }
