// jetflow dashboard: live updates over Server-Sent Events.
// Run data is only ever written with textContent, never as HTML.
(function () {
  'use strict';

  var body = document.body;
  var base = body.dataset.base || '';
  var liveEl = document.getElementById('live');

  function api(path, opts) {
    var o = opts || {};
    o.headers = { 'Accept': 'application/json' };
    o.credentials = 'same-origin';
    return fetch(base + path, o).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (data) {
        if (!res.ok) {
          throw new Error(data.error || (res.status + ' ' + res.statusText));
        }
        return data;
      });
    });
  }

  function runPath(id) { return base + '/runs/' + encodeURIComponent(id); }

  // fmtTime matches the server's "2006-01-02 15:04:05" (UTC): the text
  // of a time element before decorate() makes it local and relative.
  function fmtTime(s) {
    if (!s || s.indexOf('0001-01-01') === 0) { return ''; }
    return s.slice(0, 10) + ' ' + s.slice(11, 19);
  }

  function pad(n, w) { n = String(n); while (n.length < (w || 2)) { n = '0' + n; } return n; }

  // localTime is d in the browser's time zone, to the second.
  function localTime(d) {
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

  function utcExact(d) {
    return d.toISOString().replace('T', ' ').replace('Z', '') + ' UTC';
  }

  // relative says how far d is from now: "12s ago", "in 3m".
  function relative(d) {
    var s = Math.round((d.getTime() - Date.now()) / 1000);
    var a = Math.abs(s);
    var t;
    if (a < 5) { return 'just now'; }
    if (a < 60) { t = a + 's'; } else if (a < 3600) { t = Math.floor(a / 60) + 'm'; } else if (a < 86400) { t = Math.floor(a / 3600) + 'h'; } else { t = Math.floor(a / 86400) + 'd'; }
    return s < 0 ? t + ' ago' : 'in ' + t;
  }

  // span is a duration in ms as the server's fmtSpan writes it.
  function span(ms) {
    if (ms === null || ms === undefined || ms < 0 || isNaN(ms)) { return ''; }
    if (ms < 1000) { return Math.round(ms) + ' ms'; }
    var sec = ms / 1000;
    if (sec < 60) { return String(Math.round(sec * 10) / 10) + ' s'; }
    if (sec < 3600) { return Math.floor(sec / 60) + 'm ' + Math.floor(sec % 60) + 's'; }
    if (sec < 172800) { return Math.floor(sec / 3600) + 'h ' + Math.floor(sec % 3600 / 60) + 'm'; }
    return Math.floor(sec / 86400) + 'd ' + Math.floor(sec % 86400 / 3600) + 'h';
  }

  function parseTime(s) {
    if (!s || s.indexOf('0001-01-01') === 0) { return null; }
    var d = new Date(s);
    return isNaN(d.getTime()) ? null : d;
  }

  function queueWait(run) {
    var st = parseTime(run.startedTime), sc = parseTime(run.scheduledTime);
    return st && sc ? Math.max(0, st - sc) : -1;
  }

  function duration(run) {
    var st = parseTime(run.startedTime);
    if (!st) { return -1; }
    var end = parseTime(run.completedTime);
    if (!end) {
      if (terminal(run.state)) { return -1; }
      end = new Date();
    }
    return Math.max(0, end - st);
  }

  function terminal(state) { return state === 'success' || state === 'failed' || state === 'canceled'; }

  // decorate shows every time element of root in local time, relative to
  // now (the list shows the relative time first), with the exact UTC time
  // in its tooltip.
  function decorate(root) {
    (root || document).querySelectorAll('time[datetime]').forEach(function (t) {
      var d = parseTime(t.getAttribute('datetime'));
      if (!d) { return; }
      var rel = relative(d);
      t.textContent = t.closest('table.runs') ? rel : localTime(d) + ' (' + rel + ')';
      t.title = localTime(d) + ' local\n' + utcExact(d);
    });
  }

  function timeEl(iso) {
    var d = parseTime(iso);
    if (!d) { return null; }
    var t = el('time', null, fmtTime(iso));
    t.setAttribute('datetime', iso);
    return t;
  }

  function setTime(node, iso) {
    var t = timeEl(iso);
    node.replaceChildren();
    if (t) { node.appendChild(t); decorate(node); }
  }

  function attempts(run) {
    var a = String(run.attempts || 0);
    return run.maxAttempts ? a + ' / ' + run.maxAttempts : a;
  }

  function short(s, n) {
    s = (s || '').split(/\s+/).filter(Boolean).join(' ');
    var chars = Array.from(s);
    return chars.length > n ? chars.slice(0, n - 1).join('') + '\u2026' : s;
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function stateBadge(span, state) {
    span.className = 'state state-' + String(state).replace(/[^A-Za-z0-9_-]/g, '');
    span.textContent = state;
  }

  function setLive(on, text) {
    if (!liveEl) { return; }
    liveEl.className = 'live ' + (on ? 'on' : 'off');
    liveEl.textContent = text;
  }

  function progress(p) {
    if (!p) { return null; }
    var pct = p.percent || 0;
    if (!pct && p.total > 0) { pct = (p.processed || 0) / p.total * 100; }
    pct = Math.min(Math.max(pct, 0), 100);
    var parts = [String(Math.round(pct * 10) / 10) + '%'];
    if (p.total > 0) {
      parts.push((p.processed || 0) + ' / ' + p.total);
    } else if (p.processed > 0) {
      parts.push(p.processed + ' processed');
    }
    if (p.message) { parts.push(p.message); }
    return { pct: pct, text: parts.join(' \u00b7 ') };
  }

  // connect follows the events stream at url, reconnecting for good: the
  // browser reconnects by itself after a stream ends, but gives up when
  // the server answers an error (the dashboard cannot reach NATS), so it
  // is opened again here then.
  function connect(url, handlers) {
    var es = null, timer = null, gone = false;
    function open() {
      es = new EventSource(url);
      Object.keys(handlers).forEach(function (name) {
        es.addEventListener(name, function (ev) {
          var data;
          try { data = JSON.parse(ev.data); } catch (e) { return; }
          handlers[name](data);
        });
      });
      es.onerror = function () {
        setLive(false, 'reconnecting\u2026');
        if (es.readyState === EventSource.CLOSED && !gone && !timer) {
          timer = setTimeout(function () { timer = null; open(); }, 2000);
        }
      };
    }
    open();
    window.addEventListener('pagehide', function () {
      gone = true;
      if (timer) { clearTimeout(timer); }
      es.close();
    });
  }

  // ---- runs list -------------------------------------------------------

  function initRuns(main) {
    var tbody = document.getElementById('runs-body');
    var note = document.getElementById('page-note');
    var info = document.getElementById('page-info');
    var params = new URLSearchParams(location.search);
    var filter = {
      state: main.dataset.state || '',
      fn: main.dataset['function'] || '',
      limit: params.get('limit') || '',
      sort: params.get('sort') || '',
      order: params.get('order') || '',
      after: params.get('after') || '',
      before: params.get('before') || '',
      first: main.dataset.first === '1'
    };
    var outside = 0;
    var refreshing = false;
    var again = false;
    var timer = null;

    function matches(run) {
      return (!filter.state || run.state === filter.state) && (!filter.fn || run.name === filter.fn);
    }

    function cellsOf(tr) {
      return {
        state: tr.querySelector('.st .state'),
        attempts: tr.querySelector('.attempts'),
        created: tr.querySelector('.created'),
        scheduled: tr.querySelector('.scheduled'),
        wait: tr.querySelector('.wait'),
        duration: tr.querySelector('.duration'),
        err: tr.querySelector('.err')
      };
    }

    function fill(tr, run) {
      var c = cellsOf(tr);
      tr.dataset.state = run.state;
      tr.dataset.started = run.startedTime || '';
      tr.dataset.completed = run.completedTime || '';
      stateBadge(c.state, run.state);
      c.attempts.textContent = attempts(run);
      setTime(c.created, run.creationTime);
      setTime(c.scheduled, run.scheduledTime);
      c.wait.textContent = span(queueWait(run));
      c.duration.textContent = span(duration(run));
      c.err.textContent = short(run.error, 80);
      c.err.title = run.error || '';
    }

    function newRow(run) {
      var tr = el('tr');
      tr.dataset.id = run.id;
      var idTd = el('td', 'id');
      var a = el('a', null, run.id);
      a.href = runPath(run.id);
      idTd.appendChild(a);
      tr.appendChild(idTd);
      tr.appendChild(el('td', 'fn', run.name));
      var st = el('td', 'st');
      st.appendChild(el('span', 'state'));
      tr.appendChild(st);
      tr.appendChild(el('td', 'num attempts'));
      tr.appendChild(el('td', 'time created'));
      tr.appendChild(el('td', 'time scheduled'));
      tr.appendChild(el('td', 'num wait'));
      tr.appendChild(el('td', 'num duration'));
      tr.appendChild(el('td', 'err'));
      fill(tr, run);
      return tr;
    }

    function rows() { return Array.prototype.slice.call(tbody.querySelectorAll('tr[data-id]')); }

    function findRow(id) {
      var all = rows();
      for (var i = 0; i < all.length; i++) {
        if (all[i].dataset.id === id) { return all[i]; }
      }
      return null;
    }

    function showEmpty() {
      if (rows().length > 0) {
        var e = tbody.querySelector('tr.empty');
        if (e) { e.remove(); }
        return;
      }
      if (!tbody.querySelector('tr.empty')) {
        var tr = el('tr', 'empty');
        var td = el('td', null, filter.state || filter.fn ? 'No runs match this filter.' : 'No runs.');
        td.colSpan = 9;
        tr.appendChild(td);
        tbody.appendChild(tr);
      }
    }

    function flash(tr) {
      tr.classList.remove('changed');
      void tr.offsetWidth; // restart the animation
      tr.classList.add('changed');
    }

    function updateInfo() {
      if (info) { info.textContent = rows().length + ' shown'; }
      if (note) {
        note.hidden = outside === 0;
        note.textContent = outside + ' new or changed run' + (outside === 1 ? '' : 's') + ' on other pages';
      }
    }

    // A run that is not on the page: the first page reloads its rows
    // (the server knows where it goes in the order); another page says
    // how many changed elsewhere.
    function onRun(run) {
      var tr = findRow(run.id);
      if (tr) {
        fill(tr, run);
        tr.classList.toggle('filtered-out', !matches(run));
        flash(tr);
      } else if (matches(run)) {
        if (filter.first) {
          schedule();
        } else {
          outside++;
        }
      }
      showEmpty();
      updateInfo();
    }

    function onRemoved(d) {
      var tr = findRow(d.id);
      if (tr) { tr.remove(); showEmpty(); updateInfo(); }
    }

    function setCounts(c) {
      document.querySelectorAll('[data-count]').forEach(function (span) {
        var k = span.dataset.count;
        if (Object.prototype.hasOwnProperty.call(c, k)) { span.textContent = String(c[k]); }
      });
    }

    // schedule reloads the rows soon: at most every 500 ms, and less often
    // when a reload is slow (each is a scan of the runs bucket's headers).
    var took = 0;
    function schedule() {
      if (timer) { return; }
      timer = setTimeout(function () { timer = null; refresh(); }, Math.max(500, 2 * took));
    }

    // refresh reloads the page's rows in the server's order: on
    // (re)connect, changes made before the events stream was in place are
    // picked up.
    function refresh() {
      if (refreshing) { again = true; return; }
      var q = new URLSearchParams();
      if (filter.state) { q.set('state', filter.state); }
      if (filter.fn) { q.set('function', filter.fn); }
      if (filter.limit) { q.set('limit', filter.limit); } else { q.set('limit', main.dataset.limit); }
      if (filter.sort) { q.set('sort', filter.sort); }
      if (filter.order) { q.set('order', filter.order); }
      if (filter.after) { q.set('after', filter.after); }
      if (filter.before) { q.set('before', filter.before); }
      refreshing = true;
      var start = Date.now();
      api('/api/runs?' + q.toString()).then(function (page) {
        took = Date.now() - start;
        var old = {};
        rows().forEach(function (tr) { old[tr.dataset.id] = tr; });
        var frag = document.createDocumentFragment();
        page.runs.forEach(function (run) {
          var tr = old[run.id];
          if (tr) { fill(tr, run); } else { tr = newRow(run); flash(tr); }
          frag.appendChild(tr);
        });
        rows().forEach(function (tr) { tr.remove(); });
        tbody.insertBefore(frag, tbody.firstChild);
        setCounts(page.counts);
        main.dataset.next = page.next || '';
        main.dataset.prev = page.prev || '';
      }).catch(function (err) {
        setLive(false, 'error: ' + err.message);
      }).then(function () {
        refreshing = false;
        showEmpty();
        updateInfo();
        main.dataset.live = 'ready';
        if (again) { again = false; refresh(); }
      });
    }

    // Durations of running runs and relative times move with the clock.
    setInterval(function () {
      rows().forEach(function (tr) {
        if (tr.dataset.state === 'inProgress' && tr.dataset.started) {
          tr.querySelector('.duration').textContent = span(Date.now() - new Date(tr.dataset.started));
        }
      });
      decorate(tbody);
    }, 5000);

    var url = base + '/api/events' + (filter.fn ? '?function=' + encodeURIComponent(filter.fn) : '');
    connect(url, {
      ready: function (c) { setLive(true, 'live'); setCounts(c); refresh(); },
      counts: setCounts,
      run: onRun,
      removed: onRemoved
    });
  }

  // ---- one run ---------------------------------------------------------

  function initRun(main) {
    var id = main.dataset.run;
    var form = document.getElementById('cancel-form');
    var confirmEl = document.getElementById('cancel-confirm');
    var cancelBtn = document.getElementById('cancel-btn');
    var rerunForm = document.getElementById('rerun-form');
    var msg = document.getElementById('cancel-msg');
    var childrenEl = document.getElementById('children');
    var childrenCount = document.getElementById('children-count');
    var rerunsEl = document.getElementById('reruns');
    var attemptsBody = document.querySelector('#attempts tbody');
    var pending = false;
    var again = false;
    var last = null;

    function field(name, text) {
      document.querySelectorAll('[data-field="' + name + '"]').forEach(function (e) { e.textContent = text; });
    }
    function timeField(name, iso) {
      document.querySelectorAll('[data-field="' + name + '"]').forEach(function (e) { setTime(e, iso); });
    }

    function runLink(cid, state) {
      var li = el('span', 'rerun');
      li.dataset.id = cid;
      var a = el('a', null, cid);
      a.href = runPath(cid);
      li.appendChild(a);
      li.appendChild(document.createTextNode(' '));
      var s = el('span');
      stateBadge(s, state || '');
      li.appendChild(s);
      return li;
    }

    function childItem(cid, state) {
      var li = el('li');
      li.dataset.id = cid;
      var a = el('a', null, cid);
      a.href = runPath(cid);
      li.appendChild(a);
      li.appendChild(document.createTextNode(' '));
      var s = el('span');
      stateBadge(s, state || '');
      li.appendChild(s);
      return li;
    }

    // attemptRow is one attempt: a = {attempt, worker, startedTime,
    // completedTime, state, error}.
    function attemptRow(a, max) {
      var tr = el('tr');
      tr.dataset.attempt = String(a.attempt);
      tr.appendChild(el('td', 'num', a.attempt + (max ? ' / ' + max : '')));
      tr.appendChild(el('td', 'id', a.worker || ''));
      var st = el('td');
      setTime(st, a.startedTime);
      tr.appendChild(st);
      var en = el('td');
      setTime(en, a.completedTime);
      tr.appendChild(en);
      tr.appendChild(el('td', 'num', span(a.duration)));
      var oc = el('td');
      var badge = el('span');
      stateBadge(badge, a.state || '');
      oc.appendChild(badge);
      tr.appendChild(oc);
      var er = el('td', 'err-cell');
      er.appendChild(el('pre', 'error-text', a.error || ''));
      tr.appendChild(er);
      return tr;
    }

    function renderAttempts(run) {
      attemptsBody.replaceChildren();
      // A record that keeps every attempt (a "history" list, when the
      // worker writes one) shows them all.
      if (Array.isArray(run.history) && run.history.length > 0) {
        run.history.forEach(function (a) {
          var s = parseTime(a.startedTime), e = parseTime(a.completedTime);
          attemptsBody.appendChild(attemptRow({
            attempt: a.attempt, worker: a.worker, startedTime: a.startedTime, completedTime: a.completedTime,
            state: a.outcome, error: a.error, duration: s && e ? e - s : -1
          }, run.maxAttempts));
        });
        // The attempt running or waiting now is the record's own.
        if (run.attempts > run.history[run.history.length - 1].attempt) {
          attemptsBody.appendChild(attemptRow({
            attempt: run.attempts, worker: run.owner, startedTime: run.startedTime, completedTime: run.completedTime,
            state: run.state, error: terminal(run.state) ? run.error : '', duration: duration(run)
          }, run.maxAttempts));
        }
        return;
      }
      if (!run.attempts) {
        var tr0 = el('tr', 'empty');
        var td0 = el('td', null, 'No attempt has started yet.');
        td0.colSpan = 7;
        tr0.appendChild(td0);
        attemptsBody.appendChild(tr0);
        return;
      }
      attemptsBody.appendChild(attemptRow({
        attempt: run.attempts, worker: run.owner, startedTime: run.startedTime, completedTime: run.completedTime,
        state: run.state, error: run.error, duration: duration(run)
      }, run.maxAttempts));
    }

    function render(run) {
      last = run;
      stateBadge(document.getElementById('run-state'), run.state);
      document.getElementById('run-state').classList.add('big');
      field('state', run.state);
      field('attempts', attempts(run));
      timeField('creationTime', run.creationTime);
      timeField('scheduledTime', run.scheduledTime);
      timeField('startedTime', run.startedTime);
      timeField('completedTime', run.completedTime);
      field('queueWait', span(queueWait(run)));
      field('duration', span(duration(run)));
      field('error', run.error || '');
      var ended = terminal(run.state);
      if (form) {
        form.hidden = ended;
        if (ended) { confirmEl.hidden = true; cancelBtn.hidden = false; }
      }
      if (rerunForm) { rerunForm.hidden = !(run.state === 'failed' || run.state === 'canceled'); }
      var p = progress(run.progress);
      var sec = document.getElementById('progress');
      sec.hidden = !p;
      if (p) {
        document.getElementById('progress-bar').value = p.pct;
        document.getElementById('progress-text').textContent = p.text;
      }
      document.getElementById('result').textContent =
        run.result === undefined ? '' : JSON.stringify(run.result, null, 2);
      renderAttempts(run);
      var known = {};
      childrenEl.querySelectorAll('li[data-id]').forEach(function (li) { known[li.dataset.id] = li; });
      (run.children || []).forEach(function (cid) {
        if (known[cid]) { return; }
        var li = childItem(cid, '');
        childrenEl.appendChild(li);
        api('/api/runs/' + encodeURIComponent(cid)).then(function (c) {
          stateBadge(li.querySelector('span'), c.state);
        }).catch(function () {});
      });
      childrenCount.textContent = String((run.children || []).length);
    }

    // loadSteps shows a workflow's steps (Config.Steps) as a table with a
    // timeline bar per step, from the first step's start to now or the
    // last step's end.
    function loadSteps() {
      return api('/api/runs/' + encodeURIComponent(id) + '/steps').then(function (res) {
        var st = res && res.steps;
        var section = document.getElementById('steps-section');
        if (!section || !st || !st.steps) { return; }
        section.hidden = false;
        var steps = st.steps;
        document.getElementById('steps-count').textContent = String(steps.length);
        var waiting = document.getElementById('steps-waiting');
        waiting.hidden = !st.waiting;
        waiting.textContent = st.waiting ? 'Waiting for ' + (st.waits || []).join(', ') : '';
        var t0 = null, t1 = null;
        steps.forEach(function (s) {
          var a = parseTime(s.started), b = parseTime(s.completed) || new Date();
          if (a && (!t0 || a < t0)) { t0 = a; }
          if (a && (!t1 || b > t1)) { t1 = b; }
        });
        var total = t0 && t1 ? Math.max(t1 - t0, 1) : 1;
        var body = document.querySelector('#steps tbody');
        body.replaceChildren();
        steps.forEach(function (s) {
          var tr = el('tr');
          tr.dataset.step = s.step;
          var a = parseTime(s.started), b = parseTime(s.completed);
          tr.appendChild(el('td', 'id', s.step));
          tr.appendChild(el('td', null, s.name));
          tr.appendChild(el('td', null, s.kind));
          var stc = el('td');
          stc.appendChild(el('span', 'state state-' + s.state, s.state));
          tr.appendChild(stc);
          tr.appendChild(el('td', 'num', s.attempts ? String(s.attempts) : ''));
          var tc = el('td');
          var te = timeEl(s.started);
          if (te) { tc.appendChild(te); }
          tr.appendChild(tc);
          tr.appendChild(el('td', 'num', a && b ? span(b - a) : ''));
          var bar = el('td', 'timeline');
          if (a) {
            var div = el('div', 'bar state-' + s.state);
            div.style.marginLeft = (100 * (a - t0) / total).toFixed(1) + '%';
            div.style.width = Math.max(0.5, 100 * ((b || new Date()) - a) / total).toFixed(1) + '%';
            bar.appendChild(div);
          }
          tr.appendChild(bar);
          tr.appendChild(el('td', 'err-cell', s.error || ''));
          body.appendChild(tr);
        });
      }).catch(function () {});
    }

    function loadReruns() {
      return api('/api/runs/' + encodeURIComponent(id) + '/reruns').then(function (res) {
        rerunsEl.replaceChildren();
        res.reruns.forEach(function (r) {
          rerunsEl.appendChild(runLink(r.id, r.state));
          rerunsEl.appendChild(document.createTextNode(' '));
        });
      }).catch(function () {});
    }

    // reload reads the whole record; changes that arrive meanwhile are
    // read once more after it.
    function reload() {
      if (pending) { again = true; return; }
      pending = true;
      Promise.all([
        api('/api/runs/' + encodeURIComponent(id)).then(render),
        loadReruns(),
        loadSteps()
      ]).catch(function (err) {
        setLive(false, 'error: ' + err.message);
      }).then(function () {
        pending = false;
        main.dataset.live = 'ready';
        if (again) { again = false; reload(); }
      });
    }

    if (form) {
      // Cancel asks first: the button shows the confirmation, which does it.
      form.addEventListener('submit', function (ev) {
        ev.preventDefault();
        cancelBtn.hidden = true;
        confirmEl.hidden = false;
        document.getElementById('cancel-no').focus();
      });
      document.getElementById('cancel-no').addEventListener('click', function () {
        confirmEl.hidden = true;
        cancelBtn.hidden = false;
      });
      document.getElementById('cancel-yes').addEventListener('click', function () {
        var yes = document.getElementById('cancel-yes');
        yes.disabled = true;
        msg.textContent = 'canceling\u2026';
        api('/api/runs/' + encodeURIComponent(id) + '/cancel', { method: 'POST' }).then(function (res) {
          msg.textContent = res.canceled ? 'canceled' : 'the run had already ended (' + res.run.state + ')';
          confirmEl.hidden = true;
          cancelBtn.hidden = false;
          render(res.run);
        }).catch(function (err) {
          msg.textContent = 'cancel failed: ' + err.message;
        }).then(function () { yes.disabled = false; });
      });
    }

    if (rerunForm) {
      rerunForm.addEventListener('submit', function (ev) {
        ev.preventDefault();
        var btn = rerunForm.querySelector('button');
        btn.disabled = true;
        msg.textContent = 're-running\u2026';
        api('/api/runs/' + encodeURIComponent(id) + '/rerun', { method: 'POST' }).then(function (res) {
          msg.replaceChildren(document.createTextNode('started '));
          var a = el('a', null, res.run.id);
          a.id = 'rerun-link';
          a.href = runPath(res.run.id);
          msg.appendChild(a);
          return loadReruns();
        }).catch(function (err) {
          msg.textContent = 're-run failed: ' + err.message;
        }).then(function () { btn.disabled = false; });
      });
    }

    setInterval(function () {
      if (last && last.state === 'inProgress') { field('duration', span(duration(last))); }
      decorate(main);
    }, 5000);

    connect(base + '/api/events?run=' + encodeURIComponent(id), {
      ready: function () { setLive(true, 'live'); reload(); },
      run: function () { reload(); },
      removed: function () { msg.textContent = 'this run\u2019s record has expired'; }
    });
  }

  // ---- crons -----------------------------------------------------------

  function initCrons(main) {
    var msg = document.getElementById('cron-msg');
    main.querySelectorAll('form[data-action]').forEach(function (f) {
      f.addEventListener('submit', function (ev) {
        ev.preventDefault();
        var btn = f.querySelector('button');
        btn.disabled = true;
        var action = f.dataset.action;
        var name = f.closest('tr').dataset.cron;
        api('/api/crons/' + encodeURIComponent(name) + '/' + action, { method: 'POST' }).then(function (res) {
          if (action === 'trigger') {
            msg.replaceChildren(document.createTextNode(name + ': started '));
            var a = el('a', null, res.run.id);
            a.id = 'triggered-link';
            a.href = runPath(res.run.id);
            msg.appendChild(a);
            btn.disabled = false;
            return;
          }
          location.reload();
        }).catch(function (err) {
          msg.textContent = name + ': ' + action + ' failed: ' + err.message;
          btn.disabled = false;
        });
      });
    });
    main.dataset.live = 'ready';
  }

  var runs = document.getElementById('runs-page');
  if (runs) { initRuns(runs); }
  var run = document.getElementById('run-page');
  if (run) { initRun(run); }
  var crons = document.getElementById('crons-page');
  if (crons) { initCrons(crons); }
  // A page with nothing live to load (functions, triggers, an error) is
  // ready once this script has run.
  var main = document.querySelector('main');
  if (main && !runs && !run && !crons) { main.dataset.live = 'ready'; }
  decorate(document);
}());
