package embedded

import (
	"fmt"
	"net/url"
)

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("embedded: route %q: %w", s, err)
	}
	return u, nil
}
