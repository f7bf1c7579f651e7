// kfed dashboard: live updates by server-sent events. Every fragment comes rendered and escaped
// by the server; log lines are added as text, never as markup.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (live && live.dataset.stream && window.EventSource) {
    // The view's fragment (the jobs table, the fleet, the queues), as the server renders it.
    const view = new EventSource(live.dataset.stream);
    view.addEventListener("fragment", (event) => {
      live.innerHTML = event.data;
      live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
    });
    // The session ended (signed out or expired): no more updates, and no reconnecting.
    view.addEventListener("end", () => {
      view.close();
      live.dataset.ended = "true";
    });
    window.addEventListener("pagehide", () => view.close());
  }
  const log = document.getElementById("log");
  if (log && log.dataset.stream && window.EventSource) {
    const lines = new EventSource(log.dataset.stream);
    lines.addEventListener("line", (event) => {
      log.append(document.createTextNode(event.data + "\n"));
    });
    lines.addEventListener("end", (event) => {
      if (event.data) {
        log.append(document.createTextNode(event.data + "\n"));
      }
      lines.close();
      log.dataset.ended = "true";
    });
    window.addEventListener("pagehide", () => lines.close());
  }
});
