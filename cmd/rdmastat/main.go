// Command rdmastat lists the rdmanet connections and listeners of a
// running process, as smcss lists SMC-R sockets: one line per listener and
// per connection, with addresses, state, IA, age and the connection's
// counters (bytes, RDMA Writes, control messages, waits, errors).
//
// The process must serve rdmanet.StatsHandler, e.g.
//
//	http.Handle("/debug/rdmanet", rdmanet.StatsHandler())
//	go http.ListenAndServe("127.0.0.1:6060", nil)
//
// or expvar's /debug/vars, where the listing is the "rdmanet" variable.
// Then:
//
//	rdmastat -url http://127.0.0.1:6060/debug/rdmanet
//	rdmastat -url http://127.0.0.1:6060/debug/vars -json
//
// -json prints the listing as the process serves it instead of the table.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rdmanet/rdmanet/rdmanet"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its arguments and outputs, for the tests; it
// returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rdmastat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	u := fs.String("url", "http://127.0.0.1:6060/debug/rdmanet",
		"the process's rdmanet.StatsHandler, or its expvar /debug/vars")
	asJSON := fs.Bool("json", false, "print the listing as JSON, as served, instead of a table")
	timeout := fs.Duration("timeout", 5*time.Second, "give up on the process after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rdmastat [-url URL] [-json] [-timeout D]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	raw, err := fetch(ctx, *u)
	if err != nil {
		fmt.Fprintln(stderr, "rdmastat:", err)
		return 1
	}
	if *asJSON {
		var out bytes.Buffer
		if err := json.Indent(&out, raw, "", "  "); err != nil {
			out.Reset()
			out.Write(raw)
		}
		out.WriteByte('\n')
		stdout.Write(out.Bytes())
		return 0
	}
	var l rdmanet.Listing
	if err := json.Unmarshal(raw, &l); err != nil {
		fmt.Fprintf(stderr, "rdmastat: %s did not serve an rdmanet listing: %v\n", *u, err)
		return 1
	}
	if err := l.WriteTable(stdout); err != nil {
		fmt.Fprintln(stderr, "rdmastat:", err)
		return 1
	}
	return 0
}

// fetch gets the listing's JSON from u: StatsHandler's with ?format=json,
// or the "rdmanet" member of an expvar page.
func fetch(ctx context.Context, u string) (json.RawMessage, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return nil, err
	}
	if pu.Scheme == "" {
		// "host:port/path", as one types it.
		if pu, err = url.Parse("http://" + u); err != nil {
			return nil, err
		}
	}
	expvarPage := strings.HasSuffix(pu.Path, "/debug/vars")
	if !expvarPage {
		q := pu.Query()
		q.Set("format", "json")
		pu.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pu.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", pu.Redacted(), resp.Status, strings.TrimSpace(string(body)))
	}
	if !expvarPage {
		return body, nil
	}
	var vars map[string]json.RawMessage
	if err := json.Unmarshal(body, &vars); err != nil {
		return nil, fmt.Errorf("%s: not an expvar page: %v", pu.Redacted(), err)
	}
	v, ok := vars[rdmanet.ExpvarName]
	if !ok {
		return nil, errors.New(pu.Redacted() + ": no \"" + rdmanet.ExpvarName + "\" variable (does the process use rdmanet?)")
	}
	return v, nil
}
