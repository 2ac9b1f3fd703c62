// Package statuspage holds the status page's test in a real browser
// (docs/status-page.md): headless Chromium driven by chromedp loads the
// admin listener's page in front of a real gateway and simulator. The test
// is built with the browser tag (make test-browser); without Chromium it
// skips with a message, and fails when CI=true. It has no code of its own.
package statuspage
