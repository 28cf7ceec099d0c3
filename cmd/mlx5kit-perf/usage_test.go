package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// -help and docs/guide.md name every flag the table refuses, so neither
// list falls behind the table.
func TestUsageAndGuideNameEveryRefusedFlag(t *testing.T) {
	names := refusedFlags()
	require.NotEmpty(t, names)
	help := usage()
	guide, err := os.ReadFile("../../docs/guide.md")
	require.NoError(t, err)
	para := regexp.MustCompile("(?s)Refused, each with one line naming the flag.*?Any other flag is").Find(guide)
	require.NotNil(t, para, "docs/guide.md's paragraph of refused flags")
	for _, name := range names {
		require.Regexp(t, `(^|\s)`+regexp.QuoteMeta(name)+`[\s;]`, help, "-help does not name %s", name)
		require.True(t, strings.Contains(string(para), "`"+name+"`") || strings.Contains(string(para), "`"+name+"/"),
			"docs/guide.md's refused flags leave out %s", name)
	}
}
