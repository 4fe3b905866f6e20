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
//   - / lists runs a page at a time, newest activity first (by last
//     write: a state change or a heartbeat), or newest created first, or
//     sorted by scheduled time, state or id (click a column's header; a
//     second click reverses it), filtered by state and function, with
//     the number of runs in each state. Columns: id, function, state,
//     attempts, created and scheduled times (relative, local time and the
//     exact UTC time in the tooltip), queue wait (started minus
//     scheduled), duration (completed, or now, minus started) and error.
//     Next and Previous follow cursors both ways. Rows and counts follow
//     changes live; on the first page a new run appears on top.
//   - /runs/<id> shows every field of one run: arguments and result as
//     indented JSON, a progress bar when the run reports progress, every
//     attempt with its worker, start, end, outcome and error (from the
//     record's history, jetflow.Run.History, kept once a run has had more
//     than one attempt), its parent and children, a Cancel button that asks
//     for confirmation while it has not ended, and Re-run on a failed or
//     canceled run: a new run of the same function with the same
//     arguments, id <id>-rerun-<n>, whose parent is the run; each page
//     links the other ("Retry of", "Re-runs").
//   - /functions lists what live workers serve, with Pause and Resume
//     (producer.PauseFunction: every worker stops taking the function's
//     runs, which wait as pending meanwhile); /crons lists the crons when
//     Config.Crons is set, with Trigger now (the cron's call, now, id
//     trigger-<name>-<unix second>) and, when Config.Crons is a
//     CronController (*scheduler.Crons), Pause and Resume. Each button is
//     shown only to a NATS user that may use it (see Buttons and NATS
//     rights below). A cron record that cannot be used (not
//     JSON, a schedule that does not validate, a key that is no cron
//     name: kv.CronInfo.Unreadable) is a row naming why, without buttons;
//     its Trigger now, Pause and Resume answer 422 with the reason
//     (kv.ErrBadCronRecord, which is scheduler.ErrBadCronRecord).
//   - /triggers lists the event triggers (package trigger): source,
//     target, state (running, held at its window, paused, no runner,
//     unreadable with the reason), the live runners' counters and the
//     consumer's backlog (kv.ReadTriggers).
//   - /favicon.ico is the dashboard's icon (SVG).
//
// # Buttons and NATS rights
//
// A page shows a button only when the dashboard's NATS user has the right
// it needs (docs/permissions.md), as any other could only answer 403:
//
//   - Cancel and Re-run (/runs/<id>) and Trigger now (/crons): writing run
//     records, $KV.<prefix>_runs.<id>. Cancel also publishes the cancel
//     notice (<prefix>.cancel) and purges the run's waiting entry, and
//     Re-run and Trigger now publish the run (<prefix>.fn.<function>); a
//     user denied those but allowed the record still cancels and starts
//     runs (the scheduler's repair sweep publishes them);
//   - Pause and Resume of a function (/functions): writing its pause mark,
//     $KV.<prefix>_functions.=paused.<function>;
//   - Pause and Resume of a cron (/crons): writing the crons bucket,
//     $KV.<prefix>_crons.def.<name>.
//
// Each right is asked of the server with a write that cannot succeed: a
// conditional write of the key jetflow-dashboard-probe, in the bucket the
// buttons write, at a revision no key has. Allowed, the stream refuses it
// and stores nothing; denied, the server answers with a permissions
// violation. The answer is kept a minute; an unclear one (a timeout, an
// outage) shows the buttons, and the server still refuses what it must. A
// page without a button says why ("This dashboard's NATS user may not
// ..."). The read-only dashboard of docs/permissions.md sees no button
// that acts; a POST to an action still answers 403.
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
// Runs are jetflow.Run records with its JSON field names (id, name, state,
// scheduledTime, creationTime, startedTime, completedTime, attempts,
// error, parent, children, progress, ...), as the CLI's --json prints them.
//
//	GET  /api/runs?state=&function=&limit=&sort=&order=&after=|before=
//	         {"runs": [...], "next": "<cursor>", "prev": "<cursor>",
//	          "sort": "updated", "order": "desc", "counts": {...}, "indexed": bool}
//	GET  /api/runs/<id>                             the run record
//	POST /api/runs/<id>/cancel                      {"canceled": bool, "run": {...}}
//	POST /api/runs/<id>/rerun                       201 {"run": {...}, "retryOf": "<id>"}
//	GET  /api/runs/<id>/reruns                      {"retryOf": "<id>"|"", "reruns": [...]}
//	GET  /api/runs/<id>/steps                       {"steps": {...}|null} (Config.Steps: a workflow.Status)
//	GET  /api/counts?function=                      {"pending": n, ..., "total": n, "source": "index"|"scan", "asOf": t}
//	GET  /api/functions                             {"functions": [kv.FunctionInfo...]} (maxAttempts kv.UnlimitedAttempts: no limit)
//	POST /api/functions/<name>/pause|resume         {"function": "<name>", "paused": bool}
//	GET  /api/crons                                 {"crons": [kv.CronInfo...]} (Config.Crons)
//	GET  /api/triggers                              {"triggers": [kv.TriggerInfo...]}
//	POST /api/crons/<name>/pause|resume|trigger     {"cron": {...}, "run": {...} (trigger)}
//	GET  /api/events?function=|run=                 Server-Sent Events
//
// sort is updated (the default: newest activity first, desc only),
// created (newest first only), scheduled, state or id; order is desc (the
// default) or asc. next and prev are opaque cursors: pass next as after=
// for the following page and prev as before= for the one before; each is
// "" at its end.
//
// With a scheduler running, its run index (docs/runindex.md) serves the
// updated order and the counts: a page reads about the records it shows
// and the counts are one read, true a second or so ago (asOf), whatever
// the number of records kept ("indexed": true, "source": "index"). The
// other orders, and every order without a scheduler, cost one header-only
// scan of the runs bucket (it also gives the counts) and read the records
// they show; in created order it reads records newest scheduled first
// until no older one can have been created later (creation is never after
// the scheduled time), about a page's worth near the top. A run published
// without a record yet is read from its waiting message.
//
// Re-run answers 409 for a run that is not failed or canceled; pause and
// resume answer 501 when Config.Crons cannot pause (CronsOf). POSTs from
// other origins are refused (403), as every POST.
//
// Errors are JSON, {"error": "..."}, with the status that fits: 400 for a
// bad parameter, 404 for an unknown run or cron (jetflow.ErrNotFound), 405
// with an Allow header for a wrong method, 409 and 501 as above, 422 for a
// record jetflow did not write (jetflow.ErrBadRecord: a run's, a cron's, a
// trigger's), 403 for what the dashboard's NATS user may not do, 500
// otherwise. A page answers the same statuses with an error page naming
// the reason: /runs/<id> of a run record that cannot be read is 422.
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
//     change (from the run index, or a header-only scan of the runs bucket
//     without a scheduler).
//
// With ?function=F only that function's runs and counts are sent; with
// ?run=ID only that run's changes. The stream ends when the dashboard's
// connection to NATS is lost, and answers 503 while it is: the page says
// it is not live, keeps reconnecting, and reloads what it shows on the
// "ready" of the stream it gets once NATS is back.
package dashboard
