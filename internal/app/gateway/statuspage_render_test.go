package gateway

import (
	"strings"
	"testing"
)

// TestRenderPageEscapesEveryValue: a value in any slot of the page (a
// problem, a section's id, title and note, a caption, a head, a cell and
// its class, an empty table's text, the time) is text, never markup, and
// never a placeholder of the skeleton.
func TestRenderPageEscapesEveryValue(t *testing.T) {
	const evil = `<img src=x onerror=alert(1)>"'&{{nonce}}`
	p := &page{
		Generated: evil,
		Problems:  []string{evil},
		Sections: []section{{ID: evil, Title: evil, Note: evil, Tables: []table{
			{Caption: evil, Head: []string{evil}, Rows: [][]cell{{{Text: evil, Class: evil}}}},
			{Caption: "none", Empty: evil},
		}}},
	}
	out := renderPage(p, "NONCE", 2000)
	if strings.Contains(out, "<img") || strings.Contains(out, `"'&{`) {
		t.Fatal("a value went into the page as markup")
	}
	const escaped = `&lt;img src=x onerror=alert(1)&gt;&#34;&#39;&amp;{{nonce}}`
	if n := strings.Count(out, escaped); n != 10 {
		t.Errorf("the escaped value is on the page %d times, want 10 (one per slot)", n)
	}
	if n := strings.Count(out, `nonce="NONCE"`); n != 2 {
		t.Errorf("the nonce is on the style and script %d times, want 2", n)
	}
	for _, want := range []string{"refreshes itself every 2000 ms", `<section id="problems" class="problems">`,
		"<table><tr><th>", `<td class="`, `<p class="empty">`} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(out, "{{page}}") || strings.Contains(out, "{{refresh}}") {
		t.Error("a placeholder of the skeleton is left on the page")
	}
	if ok := renderPage(&page{}, "N", 1); !strings.Contains(ok, `<section id="problems" class="ok">No problems.</section>`) {
		t.Error("a page without problems does not say so")
	}
}
