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

  // fmtTime matches the server's "2006-01-02 15:04:05" (UTC).
  function fmtTime(s) {
    if (!s || s.indexOf('0001-01-01') === 0) { return ''; }
    return s.slice(0, 10) + ' ' + s.slice(11, 19);
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

  function connect(url, handlers) {
    var es = new EventSource(url);
    Object.keys(handlers).forEach(function (name) {
      es.addEventListener(name, function (ev) {
        var data;
        try { data = JSON.parse(ev.data); } catch (e) { return; }
        handlers[name](data);
      });
    });
    es.onerror = function () { setLive(false, 'reconnecting\u2026'); };
    window.addEventListener('pagehide', function () { es.close(); });
    return es;
  }

  // ---- runs list -------------------------------------------------------

  function initRuns(main) {
    var tbody = document.getElementById('runs-body');
    var note = document.getElementById('page-note');
    var info = document.getElementById('page-info');
    var filter = {
      state: main.dataset.state || '',
      fn: main.dataset['function'] || '',
      limit: main.dataset.limit || '',
      after: main.dataset.after || '',
      next: main.dataset.next || ''
    };
    var outside = 0;
    var refreshing = false;
    var buffered = [];

    function matches(run) {
      return (!filter.state || run.state === filter.state) && (!filter.fn || run.name === filter.fn);
    }
    // inPage: the run would be listed on this page (ids in (after, next]).
    function inPage(id) {
      return (!filter.after || id > filter.after) && (!filter.next || id <= filter.next);
    }

    function cellsOf(tr) {
      return {
        state: tr.querySelector('.st .state'),
        attempts: tr.querySelector('.attempts'),
        scheduled: tr.querySelector('.scheduled'),
        completed: tr.querySelector('.completed'),
        err: tr.querySelector('.err')
      };
    }

    function timeCell(td, iso) {
      var t = el('time', null, fmtTime(iso));
      if (fmtTime(iso)) { t.setAttribute('datetime', iso); }
      td.replaceChildren(t);
    }

    function fill(tr, run) {
      var c = cellsOf(tr);
      tr.dataset.state = run.state;
      stateBadge(c.state, run.state);
      c.attempts.textContent = attempts(run);
      timeCell(c.scheduled, run.scheduledTime);
      timeCell(c.completed, run.completedTime);
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
      tr.appendChild(el('td', 'time scheduled'));
      tr.appendChild(el('td', 'time completed'));
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
        td.colSpan = 7;
        tr.appendChild(td);
        tbody.appendChild(tr);
      }
    }

    function insertSorted(tr, id) {
      var all = rows();
      for (var i = 0; i < all.length; i++) {
        if (all[i].dataset.id > id) { tbody.insertBefore(tr, all[i]); return; }
      }
      tbody.appendChild(tr);
    }

    function flash(tr) {
      tr.classList.remove('changed');
      void tr.offsetWidth; // restart the animation
      tr.classList.add('changed');
    }

    function updateInfo() {
      if (info) { info.textContent = rows().length + ' shown' + (filter.after ? ', after ' + filter.after : ''); }
      if (note) {
        note.hidden = outside === 0;
        note.textContent = outside + ' new or changed run' + (outside === 1 ? '' : 's') + ' on other pages';
      }
    }

    function onRun(run) {
      if (refreshing) { buffered.push(run); return; }
      var tr = findRow(run.id);
      if (tr) {
        fill(tr, run);
        tr.classList.toggle('filtered-out', !matches(run));
        flash(tr);
      } else if (matches(run)) {
        if (inPage(run.id)) {
          tr = newRow(run);
          insertSorted(tr, run.id);
          flash(tr);
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

    // refresh reloads the page's rows: on (re)connect, changes made
    // before the events stream was in place are picked up.
    function refresh() {
      var q = new URLSearchParams();
      if (filter.state) { q.set('state', filter.state); }
      if (filter.fn) { q.set('function', filter.fn); }
      if (filter.limit) { q.set('limit', filter.limit); }
      if (filter.after) { q.set('after', filter.after); }
      refreshing = true;
      return api('/api/runs?' + q.toString()).then(function (page) {
        var keep = {};
        page.runs.forEach(function (run) { keep[run.id] = true; });
        rows().forEach(function (tr) { if (!keep[tr.dataset.id]) { tr.remove(); } });
        page.runs.forEach(function (run) {
          var tr = findRow(run.id);
          if (tr) { fill(tr, run); } else { insertSorted(newRow(run), run.id); }
        });
        filter.next = page.next || '';
        main.dataset.next = filter.next;
      }).catch(function (err) {
        setLive(false, 'error: ' + err.message);
      }).then(function () {
        refreshing = false;
        var b = buffered;
        buffered = [];
        b.forEach(onRun);
        showEmpty();
        updateInfo();
        main.dataset.live = 'ready';
      });
    }

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
    var msg = document.getElementById('cancel-msg');
    var childrenEl = document.getElementById('children');
    var childrenCount = document.getElementById('children-count');
    var pending = false;
    var again = false;

    function field(name, text) {
      document.querySelectorAll('[data-field="' + name + '"]').forEach(function (e) { e.textContent = text; });
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

    function render(run) {
      stateBadge(document.getElementById('run-state'), run.state);
      document.getElementById('run-state').classList.add('big');
      field('state', run.state);
      field('attempts', attempts(run));
      field('scheduledTime', fmtTime(run.scheduledTime));
      field('startedTime', fmtTime(run.startedTime));
      field('completedTime', fmtTime(run.completedTime));
      field('error', run.error || '');
      var terminal = run.state === 'success' || run.state === 'failed' || run.state === 'canceled';
      if (form) { form.hidden = terminal; }
      var p = progress(run.progress);
      var sec = document.getElementById('progress');
      sec.hidden = !p;
      if (p) {
        document.getElementById('progress-bar').value = p.pct;
        document.getElementById('progress-text').textContent = p.text;
      }
      document.getElementById('result').textContent =
        run.result === undefined ? '' : JSON.stringify(run.result, null, 2);
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

    // reload reads the whole record; changes that arrive meanwhile are
    // read once more after it.
    function reload() {
      if (pending) { again = true; return; }
      pending = true;
      api('/api/runs/' + encodeURIComponent(id)).then(render).catch(function (err) {
        setLive(false, 'error: ' + err.message);
      }).then(function () {
        pending = false;
        main.dataset.live = 'ready';
        if (again) { again = false; reload(); }
      });
    }

    if (form) {
      form.addEventListener('submit', function (ev) {
        ev.preventDefault();
        var btn = form.querySelector('button');
        btn.disabled = true;
        msg.textContent = 'canceling\u2026';
        api('/api/runs/' + encodeURIComponent(id) + '/cancel', { method: 'POST' }).then(function (res) {
          msg.textContent = res.canceled ? 'canceled' : 'the run had already ended (' + res.run.state + ')';
          render(res.run);
        }).catch(function (err) {
          msg.textContent = 'cancel failed: ' + err.message;
        }).then(function () { btn.disabled = false; });
      });
    }

    connect(base + '/api/events?run=' + encodeURIComponent(id), {
      ready: function () { setLive(true, 'live'); reload(); },
      run: function () { reload(); },
      removed: function () { msg.textContent = 'this run\u2019s record has expired'; }
    });
  }

  var runs = document.getElementById('runs-page');
  if (runs) { initRuns(runs); }
  var run = document.getElementById('run-page');
  if (run) { initRun(run); }
}());
