// mongolock dashboard: live updates by polling the page's live part.
// Written by hand; no library. Every viewer's poll is served from the
// server's shared reader, so the database sees at most one reading per
// page and refresh interval whatever the number of viewers.
(function () {
  'use strict';
  var live = document.getElementById('live');
  var toggle = document.getElementById('live-toggle');
  var status = document.getElementById('live-status');
  if (!live || !toggle || !window.fetch) {
    return;
  }
  var every = parseInt(live.getAttribute('data-refresh'), 10) || 2000;
  var paused = false;
  var timer = null;
  var busy = false;
  var last = live.innerHTML;

  function say(text) {
    if (status.textContent !== text) {
      status.textContent = text;
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!paused && !document.hidden) {
      timer = setTimeout(refresh, every);
    }
  }

  // The element to focus again after the update: the same link or
  // control, found by its href or id.
  function focusKey() {
    var el = document.activeElement;
    if (!el || !live.contains(el)) {
      return null;
    }
    if (el.id) {
      return { id: el.id };
    }
    var href = el.getAttribute('href');
    return href ? { href: href } : null;
  }

  function refocus(key) {
    if (!key) {
      return;
    }
    var el = null;
    if (key.id) {
      el = document.getElementById(key.id);
    } else {
      var links = live.querySelectorAll('a[href]');
      for (var i = 0; i < links.length && !el; i++) {
        if (links[i].getAttribute('href') === key.href) {
          el = links[i];
        }
      }
    }
    if (el) {
      el.focus({ preventScroll: true });
    }
  }

  function refresh() {
    if (busy || paused) {
      return;
    }
    busy = true;
    fetch(window.location.href, {
      headers: { 'X-Mongolock-Fragment': 'live' },
      credentials: 'same-origin',
      cache: 'no-store'
    }).then(function (resp) {
      return resp.text().then(function (html) {
        if (!resp.ok) {
          say('Live updates: the last reading failed (HTTP ' + resp.status + '); trying again.');
          return;
        }
        if (html !== last) {
          var key = focusKey();
          live.innerHTML = html;
          last = live.innerHTML;
          refocus(key);
        }
        say('');
      });
    }, function () {
      say('Live updates: the dashboard cannot be reached; trying again.');
    }).then(function () {
      busy = false;
      schedule();
    });
  }

  toggle.hidden = false;
  toggle.addEventListener('click', function () {
    paused = !paused;
    toggle.setAttribute('aria-pressed', paused ? 'true' : 'false');
    toggle.textContent = paused ? 'Resume live updates' : 'Pause live updates';
    say(paused ? 'Live updates paused.' : 'Live updates resumed.');
    if (paused) {
      clearTimeout(timer);
    } else {
      refresh();
    }
  });
  document.addEventListener('visibilitychange', function () {
    if (document.hidden) {
      clearTimeout(timer);
    } else if (!paused) {
      refresh();
    }
  });
  schedule();
}());
