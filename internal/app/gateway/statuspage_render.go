package gateway

import (
	"html"
	"strconv"
	"strings"
)

// renderPage fills the page's HTML skeleton (statuspage.html) with p. It
// writes the markup itself, every text through html.EscapeString, rather
// than through html/template: the template packages call methods by name
// through reflect, and a binary that can do that keeps every exported
// method of every type, because the linker cannot tell which one a
// template might call. For go-redis's clients alone that was over 3 MiB of
// code, paged in at start (docs/performance.md, Memory). The skeleton's
// placeholders are replaced in one pass, so no value is ever read as one.
func renderPage(p *page, nonce string, refreshMilli int64) string {
	var b strings.Builder
	if len(p.Problems) > 0 {
		b.WriteString(`<section id="problems" class="problems"><h2>Problems</h2><ul>`)
		for _, pr := range p.Problems {
			tag(&b, "li", pr)
		}
		b.WriteString("</ul></section>\n")
	} else {
		b.WriteString(`<section id="problems" class="ok">No problems.</section>` + "\n")
	}
	for _, s := range p.Sections {
		b.WriteString(`<section id="` + html.EscapeString(s.ID) + `">`)
		tag(&b, "h2", s.Title)
		b.WriteString("\n")
		if s.Note != "" {
			b.WriteString(`<p class="note">` + html.EscapeString(s.Note) + "</p>\n")
		}
		for _, t := range s.Tables {
			writeTable(&b, t)
		}
		b.WriteString("</section>\n")
	}
	return strings.NewReplacer(
		"{{nonce}}", html.EscapeString(nonce),
		"{{refresh}}", strconv.FormatInt(refreshMilli, 10),
		"{{generated}}", html.EscapeString(p.Generated),
		"{{page}}", b.String(),
	).Replace(statusHTML)
}

func writeTable(b *strings.Builder, t table) {
	if t.Caption != "" {
		tag(b, "h3", t.Caption)
		b.WriteString("\n")
	}
	if len(t.Rows) == 0 {
		b.WriteString(`<p class="empty">` + html.EscapeString(t.Empty) + "</p>\n")
		return
	}
	b.WriteString("<table>")
	if len(t.Head) > 0 {
		b.WriteString("<tr>")
		for _, h := range t.Head {
			tag(b, "th", h)
		}
		b.WriteString("</tr>")
	}
	b.WriteString("\n")
	for _, row := range t.Rows {
		b.WriteString("<tr>")
		for _, c := range row {
			b.WriteString("<td")
			if c.Class != "" {
				b.WriteString(` class="` + html.EscapeString(c.Class) + `"`)
			}
			b.WriteString(">" + html.EscapeString(c.Text) + "</td>")
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
}

// tag writes <name>text</name>, the text escaped.
func tag(b *strings.Builder, name, text string) {
	b.WriteString("<" + name + ">" + html.EscapeString(text) + "</" + name + ">")
}
