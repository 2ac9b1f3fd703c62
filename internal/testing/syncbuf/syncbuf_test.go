package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestConcurrentWritesAndLines(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				fmt.Fprintf(&b, "{\"msg\":\"m%d\",\"n\":%d}\n", i%2, j)
			}
			_ = b.String()
		}()
	}
	wg.Wait()
	b.Write([]byte("not json\n"))
	if got := len(b.Lines("m0")); got != 200 {
		t.Errorf("Lines(m0) = %d lines, want 200", got)
	}
	if got := len(b.Lines("m1")); got != 200 {
		t.Errorf("Lines(m1) = %d lines, want 200", got)
	}
	if b.Len() != len(b.String()) {
		t.Errorf("Len %d, String has %d bytes", b.Len(), len(b.String()))
	}
}
