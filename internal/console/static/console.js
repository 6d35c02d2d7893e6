// inboxd console. Plain JavaScript, no framework: each page's data comes from the REST
// API, sent the token from sessionStorage as a bearer header. Data is only ever put in
// the page as text (textContent), never as HTML.
'use strict';
(function () {
  const body = document.body;
  const prefix = body.dataset.prefix || '/ui';
  const TOKEN = 'inboxd.token';
  const PENDING = ['RECEIVED', 'FAILED'];
  const RETRYABLE = ['FAILED', 'DEAD', 'REJECTED'];

  const $ = (sel, root) => (root || document).querySelector(sel);

  // el builds an element: attrs may hold text (textContent), class, on<event> handlers
  // and plain attributes; children are nodes or strings (as text).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }
  const svg = (tag, attrs) => {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') e.textContent = v; else e.setAttribute(k, String(v));
    }
    return e;
  };

  function token() { return sessionStorage.getItem(TOKEN) || ''; }

  class APIError extends Error {
    constructor(status, data) {
      super((data && data.error) || ('HTTP ' + status));
      this.status = status;
      this.data = data;
    }
  }

  // api calls the REST API. opts.json is sent as a JSON body; opts.raw returns the
  // Response of a successful call instead of its decoded JSON.
  async function api(path, opts) {
    opts = opts || {};
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = { method: opts.method || (opts.json !== undefined ? 'POST' : 'GET'), headers, cache: 'no-store' };
    if (opts.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(opts.json);
    }
    const res = await fetch(path, init);
    if (res.ok && opts.raw) return res;
    let data = null;
    if ((res.headers.get('Content-Type') || '').includes('json')) data = await res.json().catch(() => null);
    if (!res.ok) {
      const err = new APIError(res.status, data);
      if (res.status === 401 || res.status === 403) refused(err);
      throw err;
    }
    return data;
  }

  function notice(msg, ok, link) {
    const n = $('#notice');
    n.replaceChildren(document.createTextNode(msg));
    if (link) n.append(' ', link);
    n.classList.toggle('ok', !!ok);
    n.hidden = false;
  }

  function refused(err) {
    const next = location.pathname + location.search;
    const msg = err.status === 401
      ? (token() ? 'The API refused your token for this view.' : 'This view needs a token the API accepts.')
      : 'The API does not allow this here (' + err.message + ').';
    notice(msg, false, el('a', { href: prefix + '/login?next=' + encodeURIComponent(next), text: 'Sign in' }));
  }

  function describe(err) {
    if (!(err instanceof APIError)) return err.message || String(err);
    let s = err.status + ' ' + err.message;
    if (err.data && err.data.detail !== undefined && err.data.detail !== null) {
      s += ': ' + (typeof err.data.detail === 'string' ? err.data.detail : JSON.stringify(err.data.detail));
    }
    return s;
  }

  function fail(err, where) {
    if (err instanceof APIError && (err.status === 401 || err.status === 403)) {
      if (where) where.textContent = 'Not allowed.';
      return;
    }
    if (where) where.textContent = describe(err);
    else notice(describe(err));
  }

  const pad = n => String(n).padStart(2, '0');
  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' +
      pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds());
  }
  function fmtAge(sec) {
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return sec + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm ' + (sec % 60) + 's';
    if (sec < 86400) return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
    return Math.floor(sec / 86400) + 'd ' + Math.floor((sec % 86400) / 3600) + 'h';
  }
  const fmtNum = n => Number(n).toLocaleString('en');
  const badge = s => el('span', { class: 'badge s-' + s, text: s });
  const eventLink = id => el('a', { href: prefix + '/events/' + id, class: 'event-link' }, el('code', { text: id }));
  // localInput turns a datetime-local value into RFC 3339 (UTC), or '' when empty.
  const localInput = v => (v ? new Date(v).toISOString() : '');
  const sleep = ms => new Promise(r => setTimeout(r, ms));

  // watch polls an entry until it is no longer pending (or a minute passes) and calls
  // update with each state.
  async function watch(id, update) {
    for (let i = 0; i < 120; i++) {
      await sleep(500);
      let ev;
      try { ev = await api('/journal/' + id); } catch (e) { return; }
      update(ev);
      if (!PENDING.includes(ev.status)) return;
    }
  }

  // confirmBox shows a two-step confirmation in place: a question, a confirm and a
  // cancel button; the confirm button gets the focus.
  function confirmBox(where, question, label, danger, onConfirm) {
    const yes = el('button', { type: 'button', class: danger ? 'danger' : 'primary', text: label });
    const no = el('button', { type: 'button', text: 'Cancel' });
    const box = el('div', { class: 'confirm', role: 'group', 'aria-label': 'Confirm' }, el('p', { text: question }),
      el('p', { class: 'actions' }, yes, no));
    no.addEventListener('click', () => box.remove());
    yes.addEventListener('click', async () => {
      yes.disabled = no.disabled = true;
      try { await onConfirm(box); } catch (e) { box.append(el('p', { text: describe(e) })); } finally { no.disabled = false; }
    });
    where.replaceChildren(box);
    yes.focus();
    return box;
  }

  // ---------- header ----------
  function header() {
    const signedIn = !!token();
    $('#signin').hidden = signedIn;
    $('#signout').hidden = !signedIn;
    $('#who').textContent = signedIn ? 'Token set for this tab' : '';
    $('#signout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN);
      location.assign(prefix + '/');
    });
  }

  // ---------- overview ----------
  function overview() {
    let paused = false;
    let timer = 0;
    const btn = $('#pause');
    btn.addEventListener('click', () => {
      paused = !paused;
      btn.setAttribute('aria-pressed', String(paused));
      btn.textContent = paused ? 'Resume live refresh' : 'Pause live refresh';
      if (!paused) tick();
    });
    // Neither endpoint reads the whole journal (partial indexes and, above 10,000
    // entries, the database's estimate of the total); still, the counts refresh every
    // 10 s, the chart every 30 s, and nothing while the tab is hidden.
    let n = 0;
    async function tick() {
      clearTimeout(timer);
      if (document.hidden) {
        timer = setTimeout(tick, 10000);
        return;
      }
      try {
        const withRates = n++ % 3 === 0;
        const [st, rates] = await Promise.all([api('/journal/stats'), withRates ? api('/journal/rates?minutes=10') : null]);
        renderStats(st);
        if (rates) renderChart(rates);
        $('#updated').textContent = 'Updated ' + new Date().toLocaleTimeString('en-GB') + (paused ? '' : ' · refreshes every 10 s');
        body.dataset.loaded = 'true';
      } catch (e) {
        fail(e);
        $('#updated').textContent = 'Not updated';
      }
      if (!paused) timer = setTimeout(tick, 10000);
    }
    document.addEventListener('visibilitychange', () => { if (!document.hidden && !paused) tick(); });
    tick();
  }

  function renderStats(st) {
    // A large journal's total and PROCESSED count are the database's estimates: marked ≈.
    const approx = n => (st.estimated ? '≈ ' : '') + fmtNum(n);
    $('#total').textContent = approx(st.total);
    for (const [s, n] of Object.entries(st.by_status)) {
      const cell = $('#count-' + s);
      if (cell) cell.textContent = s === 'PROCESSED' ? approx(n) : fmtNum(n);
    }
    if (st.oldest_pending_received_at) {
      $('#oldest').textContent = fmtAge(st.oldest_pending_age_seconds);
      $('#oldest-at').textContent = 'received ' + fmtTime(st.oldest_pending_received_at) + ' UTC';
    } else {
      $('#oldest').textContent = 'none';
      $('#oldest-at').textContent = 'nothing RECEIVED or FAILED';
    }
    const wms = st.feed_watermarks || [];
    if (wms.length) {
      const worst = wms.reduce((a, b) => (b.lag_seconds > a.lag_seconds ? b : a));
      $('#feedlag').textContent = fmtAge(worst.lag_seconds);
      $('#feedlag-sub').textContent = wms.length === 1 ? 'resolved ' + fmtTime(worst.resolved_at) + ' UTC' : 'worst of ' + wms.length + ' sinks';
    } else {
      $('#feedlag').textContent = 'n/a';
      $('#feedlag-sub').replaceChildren('no changefeed watermark: ', el('a', { href: prefix + '/feed', text: 'what drives processing' }));
    }
    $('#quarantine').textContent = fmtNum(st.quarantine.total);
    $('#quarantine-open').textContent = fmtNum(st.quarantine.not_reinjected) + ' not re-injected';
    if (st.outbox) {
      $('#outbox').textContent = fmtNum(st.outbox.unsent);
      $('#outbox-oldest').textContent = st.outbox.oldest_unsent_created_at ? 'oldest waits ' + fmtAge(st.outbox.oldest_unsent_age_seconds) + ' · ' : '';
      $('#outbox-sent').textContent = fmtNum(st.outbox.sent);
    }
    const statuses = Array.from(document.querySelectorAll('#by-type thead th')).slice(1).map(th => th.textContent);
    const rows = Object.keys(st.by_type).sort().map(type => {
      const tr = el('tr', {}, el('th', { scope: 'row' }, el('a', { href: prefix + '/journal?type=' + encodeURIComponent(type), text: type })));
      for (const s of statuses) {
        const uncounted = st.estimated && s === 'PROCESSED';
        tr.append(el('td', { class: 'num', 'data-type': type, 'data-status': s, text: uncounted ? '—' : fmtNum(st.by_type[type][s] || 0),
          title: uncounted ? 'not counted by type above 10,000 entries' : null }));
      }
      return tr;
    });
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: statuses.length + 1, text: 'The journal is empty.' })));
    $('#by-type tbody').replaceChildren(...rows);
  }

  function renderChart(r) {
    const chart = $('#chart');
    const W = 640, H = 180, L = 44, R = 10, T = 12, B = 26;
    const bs = r.bucket_seconds;
    const inRate = r.buckets.map(b => b.journaled / bs);
    const outRate = r.buckets.map(b => b.processed / bs);
    const peak = Math.max(1, ...inRate, ...outRate);
    // A round top for the y axis: 1, 2 or 5 times a power of ten.
    const p10 = Math.pow(10, Math.floor(Math.log10(peak)));
    const top = [1, 2, 5, 10].map(m => m * p10).find(v => v >= peak);
    const n = r.buckets.length;
    const x = i => L + (n <= 1 ? 0 : (i * (W - L - R)) / (n - 1));
    const y = v => T + (H - T - B) * (1 - v / top);
    const keep = [$('#chart-title'), $('#chart-desc')];
    chart.replaceChildren(...keep);
    for (const f of [0, 0.5, 1]) {
      chart.append(svg('line', { class: f === 0 ? 'axis' : 'grid', x1: L, x2: W - R, y1: y(top * f), y2: y(top * f) }));
      chart.append(svg('text', { x: L - 6, y: y(top * f) + 4, 'text-anchor': 'end', text: fmtRate(top * f) }));
    }
    chart.append(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
    const minutes = Math.round((n * bs) / 60);
    chart.append(svg('text', { x: L, y: H - 8, text: '−' + minutes + ' min' }));
    chart.append(svg('text', { x: W - R, y: H - 8, 'text-anchor': 'end', text: 'now' }));
    chart.append(svg('text', { x: (L + W) / 2, y: H - 8, 'text-anchor': 'middle', text: 'entries per second' }));
    const line = (vals, cls) => svg('polyline', { class: cls, points: vals.map((v, i) => x(i).toFixed(1) + ',' + y(v).toFixed(1)).join(' ') });
    chart.append(line(inRate, 'series-in'), line(outRate, 'series-out'));
    const sum = a => a.reduce((s, v) => s + v, 0) * bs;
    $('#chart-desc').textContent = 'Over the last ' + minutes + ' minutes: ' + fmtNum(sum(inRate)) + ' entries journaled, ' +
      fmtNum(sum(outRate)) + ' processed; peak ' + fmtRate(peak) + ' per second.';
  }
  function fmtRate(v) { return v >= 100 ? Math.round(v).toString() : v >= 10 ? v.toFixed(0) : v.toFixed(1); }

  // ---------- journal ----------
  function journalPage() {
    const form = $('#journal-filter');
    const params = new URLSearchParams(location.search);
    const wanted = params.getAll('status').flatMap(s => s.split(','));
    for (const box of form.querySelectorAll('input[name=status]')) box.checked = wanted.includes(box.value);
    if (params.get('type')) form.elements.type.value = params.get('type');
    let next = '';
    async function load(cursor) {
      const out = $('#result-summary');
      let path;
      try {
        path = query(cursor);
      } catch (e) {
        out.textContent = e.message;
        return;
      }
      out.textContent = 'Searching…';
      try {
        const pg = await api(path);
        const rows = pg.items.map(ev => el('tr', {},
          el('td', { text: fmtTime(ev.received_at) }),
          el('td', {}, eventLink(ev.id)),
          el('td', {}, badge(ev.status)),
          el('td', { class: 'num', text: ev.attempts }),
          el('td', {}, el('code', { text: ev.aggregate_id })),
          el('td', { text: ev.last_error || '' })));
        $('#entries tbody').replaceChildren(...rows);
        next = pg.next_cursor || '';
        $('#next').disabled = !next;
        $('#first').disabled = !cursor;
        out.textContent = pg.items.length === 0 ? 'No entries match.' :
          pg.items.length + ' entries' + (next ? ', more on the next page' : '') + (cursor ? ' (not the first page)' : '') + '.';
        body.dataset.loaded = 'true';
      } catch (e) {
        fail(e, out);
      }
    }
    function query(cursor) {
      const fd = new FormData(form);
      const type = String(fd.get('type') || '').trim();
      if (!type) throw new Error('Choose an event type.');
      const q = new URLSearchParams();
      const st = fd.getAll('status');
      if (st.length) q.set('status', st.join(','));
      for (const n of ['since', 'until']) {
        const v = localInput(fd.get(n));
        if (v) q.set(n, v);
      }
      q.set('order', fd.get('order'));
      q.set('limit', fd.get('limit'));
      for (const raw of String(fd.get('payload') || '').split('\n')) {
        const line = raw.trim();
        if (!line) continue;
        const i = line.indexOf('=');
        if (i <= 0) throw new Error('A payload filter is field=value: ' + line);
        q.set(line.slice(0, i).trim(), line.slice(i + 1).trim());
      }
      if (cursor) q.set('cursor', cursor);
      return '/journal/' + encodeURIComponent(type) + '-events?' + q.toString();
    }
    form.addEventListener('submit', e => { e.preventDefault(); load(''); });
    $('#next').addEventListener('click', () => load(next));
    $('#first').addEventListener('click', () => load(''));
    api('/journal/stats').then(st => {
      const types = Object.keys(st.by_type).sort();
      $('#types').replaceChildren(...types.map(t => el('option', { value: t })));
      if (!form.elements.type.value && types.length) form.elements.type.value = types[0];
      if (form.elements.type.value) load('');
      else $('#result-summary').textContent = 'The journal is empty.';
    }).catch(e => fail(e, $('#result-summary')));
  }

  // ---------- event ----------
  function eventPage() {
    const id = body.dataset.eventId;
    const box = $('#event');
    const actions = $('#actions');
    async function load() {
      try {
        const ev = await api('/journal/' + id);
        render(ev);
        return ev;
      } catch (e) {
        fail(e, box);
        return null;
      }
    }
    function render(ev) {
      const dl = el('dl', { class: 'meta' });
      const row = (k, v) => dl.append(el('dt', { text: k }), el('dd', {}, v));
      row('Status', el('span', { id: 'event-status' }, badge(ev.status)));
      row('Type', ev.event_type);
      row('Aggregate', el('code', { text: ev.aggregate_id }));
      row('Sequence', String(ev.sequence_no));
      row('Destination', el('code', { text: ev.tag || '—' }));
      row('Attempts', String(ev.attempts));
      row('Last error', ev.last_error || '—');
      if (PENDING.includes(ev.status)) row('Next attempt', fmtTime(ev.next_attempt_at) + ' UTC');
      if (ev.waiting_behind) row('Waiting behind', el('span', { id: 'waiting-behind' }, eventLink(ev.waiting_behind), ' (DEAD: its aggregate is parked until it is retried or skipped)'));
      if (ev.skipped_by) row('Skipped', el('span', { id: 'skipped' }, 'by ' + ev.skipped_by + ' at ' + fmtTime(ev.skipped_at) + ' UTC'));
      box.replaceChildren(dl);
      $('#payload').textContent = JSON.stringify(ev.payload, null, 2);
      timeline(ev);
      actionsFor(ev);
      body.dataset.loaded = 'true';
    }
    function timeline(ev) {
      const items = [];
      const item = (at, text, cls) => items.push(el('li', { class: cls || '' }, el('time', { datetime: at || '', text: fmtTime(at) }), text));
      item(ev.received_at, 'Received and journaled (committed in the ingest batch, status RECEIVED).');
      if (ev.timeline && ev.timeline.length) {
        // Every recorded attempt (journal_attempt): when, how long, how many runs, what came of it.
        for (const a of ev.timeline) {
          if (a.outcome === 'EDITED') {
            // An operator's edit: who, from where, and the payload as it was, kept.
            items.push(el('li', { class: 'edit' }, el('time', { datetime: a.recorded_at, text: fmtTime(a.recorded_at) }),
              'Payload edited by ' + (a.edited_by || '?') + (a.edited_from ? ' (from ' + a.edited_from + ')' : '') + ', then retried. The original:',
              el('pre', { class: 'original-payload', tabindex: '0', text: JSON.stringify(a.original_payload, null, 2) })));
            continue;
          }
          const runs = a.runs > 1 ? ', ' + a.runs + ' runs with the immediate retries' : '';
          const cls = a.outcome === 'PROCESSED' ? 'attempt ok' : 'attempt bad';
          item(a.started_at, 'Attempt ' + a.attempt + ': ' + a.outcome + ' after ' + a.duration_ms + ' ms' + runs + (a.error ? ': ' + a.error : '') + '.', cls);
        }
      } else if (ev.attempts > 0) {
        const failedOnce = ev.status === 'FAILED' || ev.status === 'DEAD' || ev.last_error;
        if (failedOnce) item(ev.updated_at, ev.attempts + (ev.attempts === 1 ? ' attempt' : ' attempts') + ' failed; the last with: ' + (ev.last_error || '(no message)'), 'bad');
      }
      switch (ev.status) {
        case 'PROCESSED': item(ev.processed_at || ev.updated_at, 'Processed: the handler\'s effect committed with this status.', 'ok'); break;
        case 'FAILED': item(ev.next_attempt_at, 'Next attempt due.'); break;
        case 'DEAD':
          if (ev.skipped_by) item(ev.skipped_at, 'Dead, skipped by ' + ev.skipped_by + ': the later events of its aggregate run on.', 'bad');
          else item(ev.updated_at, 'Dead: out of attempts. Its aggregate is parked: later events wait. Retry it once the cause is fixed, or skip it.', 'bad');
          break;
        case 'REJECTED': item(ev.updated_at, 'Rejected by the handler: ' + (ev.last_error || ''), 'bad'); break;
        default: item(ev.next_attempt_at, 'Waiting to be processed.');
      }
      $('#timeline').replaceChildren(...items);
    }
    // editForm corrects a DEAD entry's payload and retries it; the API keeps the original
    // in the history and refuses an edit that changes the event's id, type or aggregate.
    function editForm(ev) {
      const text = el('textarea', { id: 'edit-payload', name: 'payload', rows: '12', spellcheck: 'false', 'aria-label': 'Corrected payload (JSON)' });
      text.value = JSON.stringify(ev.payload, null, 2);
      const by = el('input', { type: 'text', id: 'edit-by', name: 'by', maxlength: '200', placeholder: 'your name', 'aria-label': 'Edited by', required: true });
      const result = el('p', { id: 'edit-result', role: 'status' });
      const form = el('form', { id: 'edit-form', class: 'edit-form' },
        el('h3', { text: 'Edit the payload and retry' }),
        el('p', { class: 'hint', text: 'The id, type and aggregate must stay as they are. The original payload is kept in the timeline.' }),
        text, el('p', { class: 'actions' }, by, ' ', el('button', { type: 'submit', id: 'edit-submit', class: 'primary', text: 'Save and retry' })), result);
      form.addEventListener('submit', async e => {
        e.preventDefault();
        if (!by.value.trim()) { by.focus(); return; }
        result.textContent = 'Saving…';
        try {
          const r = await api('/admin/events/' + id + '/edit-and-retry', { json: { by: by.value.trim(), payload: text.value } });
          notice('Edited by ' + r.edited_by + ' and requeued: the sweeper picks it up now.', true);
          await watch(id, render);
        } catch (err) { fail(err, result); }
      });
      return form;
    }
    function actionsFor(ev) {
      if (RETRYABLE.includes(ev.status)) {
        const p = el('p', { class: 'actions' }, el('button', {
          type: 'button', id: 'retry', class: 'primary', text: 'Retry now',
          onclick: async () => {
            try {
              const r = await api('/admin/events/' + id + '/retry', { method: 'POST', json: {} });
              notice(r.retried ? 'Requeued: the sweeper picks it up now.' : 'Not requeued: status ' + r.status + '.', true);
              await watch(id, render);
            } catch (e) { fail(e); }
          },
        }));
        if (ev.status === 'DEAD' && !ev.skipped_by) {
          // Skipping records who: the operator names themself.
          const by = el('input', { type: 'text', id: 'skip-by', maxlength: '200', placeholder: 'your name', 'aria-label': 'Skipped by' });
          p.append(' ', by, el('button', {
            type: 'button', id: 'skip', class: 'danger', text: 'Skip',
            onclick: async () => {
              if (!by.value.trim()) { by.focus(); return; }
              try {
                await api('/admin/events/' + id + '/skip', { method: 'POST', json: { by: by.value.trim() } });
                notice('Skipped: the later events of its aggregate run on.', true);
                await load();
              } catch (e) { fail(e); }
            },
          }));
        }
        actions.replaceChildren(p);
        if (ev.status === 'DEAD') actions.append(editForm(ev));
      } else if (ev.status === 'PROCESSED' && ev.payload && ev.payload.id !== undefined) {
        const where = el('div');
        actions.replaceChildren(el('p', { class: 'actions' }, el('button', {
          type: 'button', id: 'replay', text: 'Replay…',
          onclick: async () => {
            const filter = { type: ev.event_type, payload: { id: ev.payload.id } };
            try {
              const dry = await api('/admin/events/replay', { json: Object.assign({ dry_run: true }, filter) });
              confirmBox(where, 'Replay matches ' + dry.count + ' entr' + (dry.count === 1 ? 'y' : 'ies') +
                ' (dry run). Handlers are idempotent by event id, so no business effect repeats.', 'Replay ' + dry.count, false, async () => {
                const r = await api('/admin/events/replay', { json: filter });
                where.replaceChildren(el('p', { text: 'Requeued ' + r.count + '.' }));
                await watch(id, render);
              });
            } catch (e) { fail(e); }
          },
        })), where);
      } else {
        actions.replaceChildren();
      }
    }
    load();
  }

  // ---------- failures ----------
  function failuresPage() {
    let cursor = '';
    let items = [];
    async function loadMore(reset) {
      if (reset) { cursor = ''; items = []; }
      const q = new URLSearchParams({ status: 'FAILED,DEAD', limit: '500', order: 'desc' });
      if (cursor) q.set('cursor', cursor);
      try {
        const pg = await api('/admin/events?' + q.toString());
        items = items.concat(pg.items);
        cursor = pg.next_cursor || '';
        render();
        body.dataset.loaded = 'true';
      } catch (e) {
        fail(e, $('#groups-summary'));
      }
    }
    function render() {
      const groups = new Map();
      for (const ev of items) {
        const k = ev.last_error || '(no error recorded)';
        if (!groups.has(k)) groups.set(k, []);
        groups.get(k).push(ev);
      }
      const sorted = Array.from(groups.entries()).sort((a, b) => b[1].length - a[1].length);
      $('#groups-summary').textContent = items.length === 0 ? 'No FAILED or DEAD entries.' :
        items.length + ' FAILED and DEAD entries' + (cursor ? ' loaded so far' : '') + ', ' + sorted.length + (sorted.length === 1 ? ' distinct error.' : ' distinct errors.');
      $('#more').hidden = !cursor;
      $('#groups').replaceChildren(...sorted.map(([err, evs], gi) => {
        const count = s => evs.filter(e => e.status === s).length;
        const rows = evs.map(ev => {
          const status = el('td', {}, badge(ev.status));
          const btn = el('button', { type: 'button', class: 'retry', 'data-id': ev.id, text: 'Retry', 'aria-label': 'Retry ' + ev.id });
          btn.addEventListener('click', async () => {
            btn.disabled = true;
            try {
              const r = await api('/admin/events/' + ev.id + '/retry', { method: 'POST', json: {} });
              status.replaceChildren(badge(r.status), r.retried ? ' requeued' : '');
              await watch(ev.id, e => status.replaceChildren(badge(e.status)));
            } catch (e) {
              status.append(' ' + describe(e));
              btn.disabled = false;
            }
          });
          return el('tr', {}, el('td', { text: fmtTime(ev.received_at) }), el('td', {}, eventLink(ev.id)),
            el('td', { text: ev.event_type }), status, el('td', { class: 'num', text: ev.attempts }), el('td', {}, btn));
        });
        return el('section', { class: 'group', 'aria-labelledby': 'g' + gi },
          el('h3', { id: 'g' + gi }, el('code', { text: err })),
          el('p', { text: evs.length + (evs.length === 1 ? ' entry' : ' entries') + ': ' + count('DEAD') + ' DEAD, ' + count('FAILED') + ' FAILED' }),
          el('table', { class: 'list' },
            el('thead', {}, el('tr', {}, ...['Received (UTC)', 'Event', 'Type', 'Status', 'Attempts', ''].map(h => el('th', { scope: 'col', text: h })))),
            el('tbody', {}, ...rows)));
      }));
    }
    $('#more').addEventListener('click', () => loadMore(false));
    $('#reload').addEventListener('click', () => loadMore(true));
    loadMore(true);

    const form = $('#bulk-form');
    const result = $('#bulk-result');
    form.addEventListener('input', () => result.replaceChildren()); // a count is only good for the filter it was made with
    form.addEventListener('submit', async e => {
      e.preventDefault();
      const fd = new FormData(form);
      const action = fd.get('action');
      const filter = {};
      const st = fd.getAll('status');
      if (st.length) filter.status = st;
      const type = String(fd.get('type') || '').trim();
      if (type) filter.type = type;
      const payload = String(fd.get('payload') || '').trim();
      if (payload) {
        try { filter.payload = JSON.parse(payload); } catch (err) {
          result.textContent = 'Payload must be a JSON object: ' + err.message;
          return;
        }
      }
      for (const n of ['since', 'until']) { const v = localInput(fd.get(n)); if (v) filter[n] = v; }
      result.textContent = 'Counting…';
      try {
        const dry = await api('/admin/events/' + action, { json: Object.assign({ dry_run: true }, filter) });
        if (dry.count === 0) {
          result.replaceChildren(el('p', { id: 'bulk-count-result', text: 'No entries match (dry run). Nothing to do.' }));
          return;
        }
        const box = confirmBox(result, dry.count + (dry.count === 1 ? ' entry matches' : ' entries match') + ' (dry run, nothing changed yet). ' +
          (action === 'replay' ? 'Replay requeues them, PROCESSED ones included.' : 'Retry requeues them as FAILED with attempts reset.'),
        (action === 'replay' ? 'Replay ' : 'Retry ') + dry.count, action === 'replay', async () => {
          const r = await api('/admin/events/' + action, { json: filter });
          result.replaceChildren(el('p', { id: 'bulk-done', text: 'Requeued ' + r.count + (r.count === 1 ? ' entry.' : ' entries.') }));
          setTimeout(() => loadMore(true), 1500);
        });
        box.firstChild.id = 'bulk-count-result';
      } catch (err) {
        fail(err, result);
      }
    });
  }

  // ---------- quarantine ----------
  function quarantinePage() {
    const form = $('#q-filter');
    let next = '';
    let current = null;
    async function load(cursor) {
      const q = new URLSearchParams({ limit: '50' });
      const reason = form.elements.reason.value;
      if (reason) q.set('reason', reason);
      if (cursor) q.set('cursor', cursor);
      try {
        const pg = await api('/admin/quarantine?' + q.toString());
        $('#q-table tbody').replaceChildren(...pg.items.map(item => el('tr', {},
          el('td', { text: fmtTime(item.received_at) }),
          el('td', {}, el('code', { text: item.reason })),
          el('td', { text: item.detail }),
          el('td', {}, el('code', { text: item.destination })),
          el('td', { class: 'num', text: fmtNum(item.size) }),
          el('td', { class: 'reinjected', text: item.reinjected_at ? fmtTime(item.reinjected_at) : 'no' }),
          el('td', {}, el('button', { type: 'button', class: 'inspect', 'data-id': item.id, text: 'Inspect', 'aria-label': 'Inspect message ' + item.id, onclick: () => inspect(item) })))));
        next = pg.next_cursor || '';
        $('#q-next').disabled = !next;
        $('#q-first').disabled = !cursor;
        $('#q-summary').textContent = pg.items.length === 0 ? 'Nothing quarantined' + (reason ? ' for this reason.' : '.') :
          pg.items.length + ' messages' + (next ? ', more on the next page.' : '.');
        body.dataset.loaded = 'true';
      } catch (e) {
        fail(e, $('#q-summary'));
      }
    }
    async function inspect(item) {
      current = item;
      const d = $('#q-detail');
      d.hidden = false;
      $('#q-detail-h').textContent = 'Message ' + item.id;
      const dl = $('#q-meta');
      dl.replaceChildren();
      const row = (k, v) => dl.append(el('dt', { text: k }), el('dd', { text: v }));
      row('Reason', item.reason);
      row('Detail', item.detail || '—');
      row('Destination', item.destination);
      row('Message id', item.message_id || '—');
      if (item.event_id) row('Journal entry kept', item.event_id);
      row('Headers', JSON.stringify(item.headers));
      row('Received', fmtTime(item.received_at) + ' UTC');
      row('Re-injected', item.reinjected_at ? fmtTime(item.reinjected_at) + ' UTC' : 'no');
      row('Size', fmtNum(item.size) + ' bytes');
      $('#q-confirm').replaceChildren();
      $('#q-text').textContent = 'Loading…';
      $('#q-hex').textContent = '';
      $('#q-detail-h').focus();
      try {
        const res = await api('/admin/quarantine/' + item.id + '/body', { raw: true });
        const bytes = new Uint8Array(await res.arrayBuffer());
        const shown = bytes.subarray(0, 65536);
        const more = bytes.length > shown.length ? '\n… ' + fmtNum(bytes.length - shown.length) + ' more bytes: download them' : '';
        $('#q-text').textContent = new TextDecoder('utf-8', { fatal: false }).decode(shown) + more;
        $('#q-hex').textContent = hexdump(shown) + more;
      } catch (e) {
        fail(e, $('#q-text'));
      }
    }
    $('#q-download').addEventListener('click', async () => {
      if (!current) return;
      try {
        const res = await api('/admin/quarantine/' + current.id + '/body', { raw: true });
        const url = URL.createObjectURL(await res.blob());
        const a = el('a', { href: url, download: current.id + '.bin' });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
      } catch (e) { fail(e); }
    });
    $('#q-reinject').addEventListener('click', () => {
      if (!current) return;
      const item = current;
      const again = !!item.reinjected_at;
      confirmBox($('#q-confirm'), 'Publish these ' + fmtNum(item.size) + ' bytes again to ' + item.destination + '?' +
        (again ? ' It was already re-injected on ' + fmtTime(item.reinjected_at) + ' UTC; this publishes it once more.' : '') +
        ' A message that is still bad comes back to the quarantine.', 'Re-inject', true, async box => {
        const r = await api('/admin/quarantine/' + item.id + '/reinject', { json: again ? { force: true } : {} });
        box.replaceWith(el('p', { id: 'q-reinjected', text: r.status === 'reinjected' ? 'Re-injected to ' + r.destination + ' at ' + fmtTime(r.reinjected_at) + ' UTC.' : 'Already re-injected; nothing published.' }));
        item.reinjected_at = r.reinjected_at;
        load('');
      });
    });
    form.addEventListener('submit', e => { e.preventDefault(); load(''); });
    $('#q-next').addEventListener('click', () => load(next));
    $('#q-first').addEventListener('click', () => load(''));
    load('');
  }

  function hexdump(bytes) {
    const lines = [];
    for (let off = 0; off < bytes.length; off += 16) {
      const chunk = bytes.subarray(off, off + 16);
      let hex = '';
      let txt = '';
      for (let i = 0; i < 16; i++) {
        hex += i < chunk.length ? chunk[i].toString(16).padStart(2, '0') + ' ' : '   ';
        if (i === 7) hex += ' ';
        if (i < chunk.length) txt += chunk[i] >= 0x20 && chunk[i] < 0x7f ? String.fromCharCode(chunk[i]) : '.';
      }
      lines.push(off.toString(16).padStart(8, '0') + '  ' + hex + ' |' + txt + '|');
    }
    return lines.join('\n');
  }

  // ---------- feed ----------
  function feedPage() {
    api('/admin/feed').then(fd => {
      $('#jobs tbody').replaceChildren(...fd.jobs.map(j => el('tr', {},
        el('td', {}, el('code', { text: String(j.id) })),
        el('td', { text: j.status + (j.running_status ? ' (' + j.running_status + ')' : '') }),
        el('td', { text: j.high_water_at ? fmtTime(j.high_water_at) : 'none yet' }),
        el('td', { text: j.lag_seconds !== null ? fmtAge(j.lag_seconds) : '—' }),
        el('td', {}, el('code', { text: j.sink_uri })),
        el('td', { text: j.error || '' }))));
      $('#jobs-summary').textContent = fd.database === 'postgresql' ? 'PostgreSQL has no changefeed jobs.' :
        fd.jobs.length ? fd.jobs.length + (fd.jobs.length === 1 ? ' job.' : ' jobs.') : 'No changefeed job: create one with inboxd changefeed create.';
    }).catch(e => fail(e, $('#jobs-summary')));
    api('/journal/stats').then(st => {
      const wms = st.feed_watermarks || [];
      $('#watermarks tbody').replaceChildren(...wms.map(w => el('tr', {},
        el('td', {}, el('code', { text: w.sink })), el('td', {}, el('code', { text: w.resolved })),
        el('td', { text: fmtTime(w.resolved_at) }), el('td', { text: fmtAge(w.lag_seconds) }), el('td', { text: fmtTime(w.updated_at) }))));
      $('#wm-summary').textContent = wms.length ? wms.length + (wms.length === 1 ? ' sink.' : ' sinks.') : 'No resolved timestamp received.';
      body.dataset.loaded = 'true';
    }).catch(e => fail(e, $('#wm-summary')));
  }

  // ---------- replay runs ----------
  const ZERO_TIME = '0001-01-01T00:00:00Z';
  // selectionText summarizes a run's stored selection (journal.Selection as JSON).
  function selectionText(r) {
    const sel = r.Selection || {};
    const parts = [];
    if (sel.EventType) parts.push('type ' + sel.EventType);
    parts.push((sel.Statuses && sel.Statuses.length ? sel.Statuses : ['PROCESSED', 'REJECTED']).join(', '));
    if (sel.Since && sel.Since !== ZERO_TIME) parts.push('from ' + fmtTime(sel.Since));
    if (sel.Until && sel.Until !== ZERO_TIME) parts.push('before ' + fmtTime(sel.Until));
    if (sel.AggregateID) parts.push('aggregate ' + sel.AggregateID);
    if (sel.IDs && sel.IDs.length) parts.push(sel.IDs.length + (sel.IDs.length === 1 ? ' id' : ' ids'));
    if (!r.Tail) parts.push('no tail rule');
    return parts.join(' · ');
  }
  const progressText = r => fmtNum(r.Done) + ' / ' + fmtNum(r.Events) + ' done' +
    (r.Dead ? ', ' + fmtNum(r.Dead) + ' dead' : '') + (r.State === 'done' ? '' : ', ' + fmtNum(r.Pending) + ' pending');
  const runBadge = st => el('span', { class: 'badge run-' + st, text: st });
  const ACTIVE = ['running', 'paused'];

  function replaysPage() {
    const filter = $('#runs-filter');
    const params = new URLSearchParams(location.search);
    const runID = params.get('run') || '';
    if (params.get('state')) filter.elements.state.value = params.get('state');

    async function loadList() {
      const q = new URLSearchParams({ limit: '50' });
      const state = filter.elements.state.value;
      if (state) q.set('state', state);
      try {
        const pg = await api('/admin/replays?' + q.toString());
        $('#runs tbody').replaceChildren(...pg.items.map(r => el('tr', { 'data-run': r.ID },
          el('td', {}, el('a', { href: prefix + '/replays?run=' + r.ID, class: 'run-link' }, el('code', { text: r.ID.slice(0, 8) }))),
          el('td', {}, runBadge(r.State)),
          el('td', { text: r.Reason || '—' }),
          el('td', { text: r.StartedBy || '—' }),
          el('td', { text: fmtTime(r.CreatedAt) }),
          el('td', { text: selectionText(r) }),
          el('td', { class: 'progress', text: progressText(r) }),
          el('td', { class: 'num', text: r.State === 'planned' ? '—' : (r.Rate ? String(r.Rate) : 'no limit') }),
          el('td', { text: r.State === 'planned' ? '—' : (r.Publish ? 'publish' : 'suppress') }))));
        $('#runs-summary').textContent = pg.items.length === 0 ? 'No replay runs' + (state ? ' in this state.' : ' yet.') :
          pg.items.length + (pg.items.length === 1 ? ' run' : ' runs') + ', newest first.';
        body.dataset.loaded = 'true';
      } catch (e) {
        fail(e, $('#runs-summary'));
      }
    }

    let timer = 0;
    async function loadRun(focus) {
      clearTimeout(timer);
      let r;
      try {
        r = await api('/admin/replays/' + encodeURIComponent(runID));
      } catch (e) {
        $('#run-detail').hidden = false;
        fail(e, $('#run-result'));
        return;
      }
      showRun(r);
      if (focus) $('#run-h').focus();
      // A running run's progress refreshes every 2 s, while the tab is visible.
      if (r.State === 'running') timer = setTimeout(() => loadRun(false), document.hidden ? 10000 : 2000);
    }

    function showRun(r) {
      $('#run-detail').hidden = false;
      $('#run-detail').dataset.state = r.State;
      $('#run-h').textContent = 'Run ' + r.ID;
      const dl = $('#run-meta');
      dl.replaceChildren();
      const row = (k, v, id) => dl.append(el('dt', { text: k }), el('dd', { id, text: v }));
      dl.append(el('dt', { text: 'State' }), el('dd', { id: 'run-state' }, runBadge(r.State)));
      row('Selection', selectionText(r));
      row('Events', fmtNum(r.Events), 'run-events');
      row('Selected', fmtNum(r.Selected), 'run-selected');
      row('Added by the tail rule', fmtNum(r.AddedByTail), 'run-tail');
      row('Aggregates', fmtNum(r.Aggregates), 'run-aggregates');
      row('Progress', progressText(r), 'run-progress');
      row('Attempts made', fmtNum(r.Attempted), 'run-attempted');
      row('Reason', r.Reason || '—', 'run-reason');
      row('Started by', r.StartedBy || '—', 'run-by');
      row('Rate', r.State === 'planned' ? '—' : (r.Rate ? r.Rate + ' events per second' : 'no limit'), 'run-rate');
      row('Messages', r.State === 'planned' ? '—' : (r.Publish ? 'published' : 'suppressed'), 'run-publish');
      row('Created', fmtTime(r.CreatedAt) + ' UTC');
      row('Started', r.StartedAt ? fmtTime(r.StartedAt) + ' UTC' : '—');
      row('Ended', r.FinishedAt ? fmtTime(r.FinishedAt) + ' UTC' : '—');
      const types = Object.keys(r.Types || {}).sort();
      $('#run-types tbody').replaceChildren(...types.map(t => el('tr', {}, el('td', {}, el('code', { text: t })),
        el('td', { class: 'num', 'data-type': t, text: fmtNum(r.Types[t]) }))));
      $('#run-pause').hidden = r.State !== 'running';
      $('#run-resume').hidden = r.State !== 'paused';
      $('#run-cancel').hidden = !(r.State === 'planned' || ACTIVE.includes(r.State));
      $('#start-form').hidden = r.State !== 'planned';
    }

    async function act(action, json) {
      const out = $('#run-result');
      out.textContent = '';
      try {
        const r = await api('/admin/replays/' + encodeURIComponent(runID) + '/' + action, { json: json || {} });
        showRun(r);
        out.replaceChildren(el('p', { id: 'run-done', text: 'Run ' + r.State + '.' }));
        loadList();
        if (r.State === 'running') loadRun(false);
        return r;
      } catch (e) {
        fail(e, out);
        return null;
      }
    }

    if (runID) {
      $('#run-pause').addEventListener('click', () => act('pause'));
      $('#run-resume').addEventListener('click', () => act('resume'));
      $('#run-cancel').addEventListener('click', () => {
        confirmBox($('#run-result'), 'Cancel this run? Events not replayed yet stay as they are, and the run\'s aggregates are released: their live events flow again. A cancelled run cannot be resumed.',
          'Cancel run', true, async () => { await act('cancel'); });
      });
      const start = $('#start-form');
      start.addEventListener('submit', async e => {
        e.preventDefault();
        const out = $('#start-result');
        const reason = start.elements.reason.value.trim();
        const rateText = start.elements.rate.value.trim();
        const rate = rateText === '' ? 0 : Number(rateText);
        if (!reason) {
          out.textContent = 'Give a reason: it is recorded with the run, with who started it.';
          start.elements.reason.focus();
          return;
        }
        if (!/^\d+(\.\d+)?$/.test(rateText || '0') || !Number.isFinite(rate) || rate < 0) {
          out.textContent = 'The rate is a number of events per second, 0 or more (0: no limit).';
          start.elements.rate.focus();
          return;
        }
        out.textContent = 'Starting…';
        try {
          const r = await api('/admin/replays/' + encodeURIComponent(runID) + '/start',
            { json: { reason, rate, publish: start.elements.publish.value === 'true' } });
          out.replaceChildren(el('p', { id: 'start-done', text: 'Started: ' + fmtNum(r.Events) + ' events at ' + (rate ? rate + ' per second' : 'no rate limit') + '.' }));
          showRun(r);
          loadList();
          loadRun(false);
        } catch (err) {
          fail(err, out);
        }
      });
      loadRun(true);
    }

    const plan = $('#plan-form');
    plan.addEventListener('submit', async e => {
      e.preventDefault();
      const out = $('#plan-result');
      const fd = new FormData(plan);
      const sel = {};
      const type = String(fd.get('type') || '').trim();
      if (type) sel.type = type;
      const st = fd.getAll('statuses');
      if (!st.length) {
        out.textContent = 'Choose PROCESSED, REJECTED or both: FAILED and DEAD events have retry.';
        return;
      }
      sel.statuses = st;
      for (const n of ['since', 'until']) { const v = localInput(fd.get(n)); if (v) sel[n] = v; }
      const agg = String(fd.get('aggregate') || '').trim();
      if (agg) sel.aggregate = agg;
      const ids = String(fd.get('ids') || '').split(/[\s,]+/).filter(Boolean);
      if (ids.length) sel.ids = ids;
      if (fd.get('no_tail')) sel.no_tail = true;
      if (!sel.type && !sel.since && !sel.until && !sel.aggregate && !sel.ids) {
        out.textContent = 'Give at least one of event type, time received, aggregate or ids: a plan of every settled event is rarely what you want.';
        return;
      }
      out.textContent = 'Planning…';
      try {
        const r = await api('/admin/replays', { json: sel });
        out.replaceChildren(el('p', { id: 'plan-done', text: 'Planned ' + fmtNum(r.Events) + ' events (' + fmtNum(r.Selected) + ' selected, ' +
          fmtNum(r.AddedByTail) + ' added by the tail rule) over ' + fmtNum(r.Aggregates) + ' aggregates. Nothing runs until you start it. ' }),
        el('p', {}, el('a', { id: 'plan-open', href: prefix + '/replays?run=' + r.ID, text: 'Read the plan and start it' })));
        loadList();
      } catch (err) {
        fail(err, out);
      }
    });
    filter.addEventListener('submit', e => { e.preventDefault(); loadList(); });
    loadList();
  }

  // ---------- sign in ----------
  function loginPage() {
    const form = $('#login');
    const out = $('#login-result');
    form.addEventListener('submit', async e => {
      e.preventDefault();
      const t = form.elements.token.value.trim();
      if (!t) return;
      sessionStorage.setItem(TOKEN, t);
      out.textContent = 'Checking…';
      try {
        await api('/admin/events?limit=1');
      } catch (err) {
        if (err instanceof APIError && err.status === 401) {
          sessionStorage.removeItem(TOKEN);
          $('#notice').hidden = true;
          out.textContent = 'The API refused this token.';
          return;
        }
        if (!(err instanceof APIError && err.status === 403)) {
          out.textContent = describe(err);
          return;
        }
      }
      const next = new URLSearchParams(location.search).get('next') || '';
      // Only a path of this console: never an absolute or protocol-relative URL.
      location.assign(next.startsWith(prefix + '/') && !next.startsWith('//') && !next.includes('\\') ? next : prefix + '/');
    });
    form.elements.token.focus();
  }

  header();
  const pagesByName = { overview, journal: journalPage, event: eventPage, failures: failuresPage, quarantine: quarantinePage, replays: replaysPage, feed: feedPage, login: loginPage };
  const run = pagesByName[body.dataset.page];
  if (run) run();
})();
