// Package dashboard is jetflow's web UI: an http.Handler that shows runs,
// their state counts and details, lets an operator cancel a run, and pushes
// every change to the open pages as it happens.
//
//	p, _ := producer.New(ctx, js, producer.Config{})
//	http.Handle("/", dashboard.New(p, dashboard.Config{}))
//
// or, under a path of its own:
//
//	mux.Handle("/jetflow/", dashboard.New(p, dashboard.Config{BasePath: "/jetflow"}))
//
// The command `jetflow dashboard --url nats://... --listen 127.0.0.1:8080`
// serves it on its own, and `jetflow dev --http 127.0.0.1:8080` next to the
// development server.
//
// # Pages
//
//   - / lists runs (id, function, state, attempts, scheduled and completed
//     times, error) a page at a time, filtered by state and function, with
//     the number of runs in each state. Rows and counts follow changes live.
//   - /runs/<id> shows every field of one run: arguments and result as
//     indented JSON, a progress bar, its parent and children, and a Cancel
//     button while it has not ended.
//   - /functions lists what live workers serve; /crons lists the crons
//     when Config.Crons is set.
//
// The page is plain HTML from html/template with a small script and a style
// sheet embedded in the binary: no external assets, no CDN. Run data is
// escaped by the templates, and the script writes it with textContent only.
// Responses carry a Content-Security-Policy that allows nothing but the
// dashboard's own origin, and POST requests from other origins are refused
// (http.CrossOriginProtection). Requests whose Host header is neither a
// loopback name nor in Config.AllowedHosts get 421, on every route: a page
// on another name that resolves to the dashboard's address (DNS rebinding)
// cannot read or cancel runs. The dashboard has no login of its own:
// Config.Middleware is the seam for one (BearerToken, BasicAuth, or yours).
// Serve it on a loopback address, or with a login, and over TLS (a reverse
// proxy) beyond one machine.
//
//	dashboard.New(p, dashboard.Config{
//		AllowedHosts: []string{"jetflow.internal.example"},
//		Middleware:   dashboard.BearerToken(os.Getenv("DASHBOARD_TOKEN")),
//	})
//
// # JSON API
//
//	GET  /api/runs?state=&function=&limit=&after=   {"runs": [...], "next": "<cursor>"}
//	GET  /api/runs/<id>                             the run record
//	POST /api/runs/<id>/cancel                      {"canceled": bool, "run": {...}}
//	GET  /api/counts?function=                      {"pending": n, ..., "total": n}
//	GET  /api/functions                             {"functions": [kv.FunctionInfo...]}
//	GET  /api/crons                                 {"crons": [kv.CronInfo...]} (Config.Crons)
//	GET  /api/events?function=|run=                 Server-Sent Events
//
// Errors are JSON, {"error": "..."}, with the status that fits: 400 for a
// bad parameter, 404 for an unknown run (jetflow.ErrNotFound), 405 with an
// Allow header for a wrong method, 500 otherwise.
//
// # Events
//
// /api/events follows the runs bucket with a KV watch (updates only; one
// watch per connection, ended when the client goes). It sends:
//
//   - "ready" once the watch is in place, with the counts per state: a
//     client that (re)connects reloads what it shows when it gets it, so
//     nothing that changed before is missed;
//   - "run" for every new revision of a run: the record without its
//     arguments, result and trace context (read /api/runs/<id> for those);
//   - "removed" with {"id": ...} when a record is deleted or expires;
//   - "counts" with the counts per state, at most once a second while runs
//     change (each is a header-only scan of the runs bucket).
//
// With ?function=F only that function's runs and counts are sent; with
// ?run=ID only that run's changes.
package dashboard
