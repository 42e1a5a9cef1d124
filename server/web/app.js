// attnserve's web page: text and file translation over the server's LibreTranslate routes.
// Vanilla JS, no dependencies; everything it loads comes from this server.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "attnserve.apiKey";
const FORMAT_NAMES = { text: "Plain text", html: "HTML", markdown: "Markdown" };
const state = { languages: [], settings: {}, maps: [] };
const JOB_POLL_MS = 300; // between two looks at a file job's progress

function apiKey() {
  return $("api-key").value.trim();
}

function say(message, error = false) {
  const status = $("status");
  status.textContent = message;
  status.classList.toggle("error", error);
  status.setAttribute("role", error ? "alert" : "status");
}

async function getJson(path) {
  const reply = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await reply.json().catch(() => ({}));
  if (!reply.ok) throw new Error(body.error || `${path}: HTTP ${reply.status}`);
  return body;
}

function option(value, label) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = label;
  return o;
}

function nameOf(code) {
  const found = state.languages.find((l) => l.code === code);
  return found ? `${found.name} (${code})` : code;
}

function fillTargets() {
  const source = $("source").value;
  const target = $("target");
  const before = target.value;
  let codes;
  if (source === "auto") {
    codes = [...new Set(state.languages.flatMap((l) => l.targets))];
  } else {
    codes = (state.languages.find((l) => l.code === source) || { targets: [] }).targets;
  }
  target.replaceChildren(...codes.map((c) => option(c, nameOf(c))));
  if (codes.includes(before)) target.value = before;
}

function fillPickers() {
  const { settings, languages } = state;
  const source = $("source");
  const sources = languages.filter((l) => l.targets.length);
  source.replaceChildren(...sources.map((l) => option(l.code, nameOf(l.code))));
  if (settings.languageDetection) source.prepend(option("auto", "Detect language"));
  const preferred = settings.language || {};
  if (preferred.source && preferred.source.code) source.value = preferred.source.code;
  fillTargets();
  if (preferred.target && preferred.target.code) $("target").value = preferred.target.code;
  const formats = (settings.formats || ["text"]).filter((f) => f in FORMAT_NAMES);
  $("format").replaceChildren(...formats.map((f) => option(f, FORMAT_NAMES[f])));
  const files = settings.supportedFilesFormat || [];
  $("file").accept = files.join(",");
  $("file-formats").textContent = files.length ? `Formats: ${files.join(" ")}` : "Files are not translated here.";
  $("key-box").open = Boolean(settings.keyRequired) && !apiKey();
  $("served").textContent = `${languages.length} languages; up to ${settings.charLimit} characters per text.`;
}

async function translateText() {
  const text = $("text").value;
  if (!text.trim()) {
    say("Type a text to translate first.", true);
    $("text").focus();
    return;
  }
  const button = $("translate");
  button.disabled = true;
  say("Translating…");
  try {
    const reply = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({
        q: text,
        source: $("source").value,
        target: $("target").value,
        format: $("format").value,
        api_key: apiKey(),
        ...($("show-map").checked ? { attention: true } : {}),
      }),
    });
    const body = await reply.json().catch(() => ({}));
    if (!reply.ok) throw new Error(body.error || `HTTP ${reply.status}`);
    $("result").value = body.translatedText;
    showMaps(body.attention || []);
    const detected = body.detectedLanguage;
    $("detected").textContent = detected ? `Detected: ${nameOf(detected.language)}, ${detected.confidence}%` : "";
    say("Translated.");
  } catch (err) {
    say(`Translation failed: ${err.message}`, true);
  } finally {
    button.disabled = false;
  }
}

// The attention map of one sentence: a table, a row per translation word, a column per source
// word, each cell shaded by the attention that row paid to that column (scaled to the largest).
function drawMap(map) {
  const table = document.createElement("table");
  table.className = "attention";
  const peak = Math.max(...map.weights.flat(), 1e-9);
  const head = table.createTHead().insertRow();
  head.appendChild(document.createElement("th"));
  for (const word of map.source) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = word;
    head.appendChild(th);
  }
  const body = table.createTBody();
  map.target.forEach((word, j) => {
    const row = body.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = word;
    row.appendChild(th);
    (map.weights[j] || []).forEach((w, i) => {
      const cell = row.insertCell();
      cell.style.background = `rgba(11, 92, 173, ${(w / peak).toFixed(3)})`;
      cell.title = `${word} → ${map.source[i]}: ${w.toFixed(2)}`;
      const value = document.createElement("span");
      value.className = "sr-only";
      value.textContent = w.toFixed(2);
      cell.appendChild(value);
    });
  });
  $("attention-map").replaceChildren(table);
}

function showMaps(maps) {
  state.maps = maps;
  $("map-box").hidden = !maps.length;
  if (!maps.length) return;
  const pick = $("map-sentence");
  pick.replaceChildren(...maps.map((m, k) => option(String(k), `${k + 1}: ${m.source.join(" ")}`)));
  pick.disabled = maps.length < 2;
  drawMap(maps[0]);
}

// The translated file, fetched with the key in a header and saved from a blob: a key in the
// link's URL would stay in the history and in proxies' logs. The blob's URL, or null (said why).
async function downloaded(path) {
  const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
  try {
    const reply = await fetch(path, { headers });
    if (reply.ok) return URL.createObjectURL(await reply.blob());
    const body = await reply.json().catch(() => ({}));
    say(`Download failed: ${body.error || `HTTP ${reply.status}`}`, true);
  } catch {
    say("Download failed: the server could not be reached.", true);
  }
  return null;
}

// A file job polled until it ends (the key travels in a header, which EventSource cannot send),
// its sentences done / total shown on the bar; the finished job, or null (said why).
async function followJob(id, name, progress) {
  const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
  for (;;) {
    let job;
    try {
      const reply = await fetch(`/jobs/${encodeURIComponent(id)}`, { headers });
      job = await reply.json().catch(() => ({}));
      if (!reply.ok) throw new Error(job.error || `HTTP ${reply.status}`);
    } catch (err) {
      say(`File translation failed: ${err.message}`, true);
      return null;
    }
    if (job.status === "done") return job;
    if (job.status === "failed" || job.status === "cancelled") {
      say(`File translation ${job.status}: ${job.error || "no result"}`, true);
      return null;
    }
    if (job.total) {
      progress.max = job.total;
      progress.value = job.done;
      const left = job.remaining_s == null ? "" : `, about ${Math.ceil(job.remaining_s)} s left`;
      say(`Translating ${name}: ${job.done} / ${job.total} sentences${left}`);
    }
    await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
  }
}

function translateFile() {
  const file = $("file").files[0];
  if (!file) {
    say("Choose a file to translate first.", true);
    $("file").focus();
    return;
  }
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  form.append("api_key", apiKey());
  const progress = $("file-progress");
  const link = $("download");
  const button = $("file-translate");
  progress.hidden = false;
  progress.max = 100;
  progress.value = 0;
  link.hidden = true;
  button.disabled = true;
  say(`Uploading ${file.name}…`);
  const xhr = new XMLHttpRequest();
  xhr.open("POST", "/jobs");
  xhr.responseType = "json";
  xhr.upload.onprogress = (e) => {
    if (e.lengthComputable) progress.value = (100 * e.loaded) / e.total;
  };
  xhr.upload.onload = () => {
    progress.removeAttribute("value"); // indeterminate while the server translates
    say(`Translating ${file.name}…`);
  };
  xhr.onload = async () => {
    const body = xhr.response || {};
    if (xhr.status !== 202 || !body.id) {
      button.disabled = false;
      progress.hidden = true;
      say(`File translation failed: ${body.error || `HTTP ${xhr.status}`}`, true);
      return;
    }
    const job = await followJob(body.id, file.name, progress);
    button.disabled = false;
    progress.hidden = true;
    if (!job) return;
    const saved = await downloaded(`/jobs/${encodeURIComponent(job.id)}/result`);
    if (!saved) return;
    if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
    link.href = saved;
    link.download = file.name;
    link.textContent = `Download ${file.name} (${$("target").value})`;
    link.hidden = false;
    link.focus();
    say(`${file.name} translated (${job.total} sentence${job.total === 1 ? "" : "s"}).`);
  };
  xhr.onerror = () => {
    button.disabled = false;
    progress.hidden = true;
    say("File translation failed: the server could not be reached.", true);
  };
  xhr.send(form);
}

async function start() {
  $("api-key").value = localStorage.getItem(KEY_STORE) || "";
  $("api-key").addEventListener("change", () => localStorage.setItem(KEY_STORE, apiKey()));
  $("source").addEventListener("change", fillTargets);
  $("swap").addEventListener("click", () => {
    const source = $("source").value;
    if (source === "auto") return;
    const target = $("target").value;
    $("source").value = target;
    fillTargets();
    $("target").value = source;
  });
  $("translate").addEventListener("click", translateText);
  $("text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) translateText();
  });
  $("text").addEventListener("input", () => {
    $("chars").textContent = `${$("text").value.length} / ${state.settings.charLimit || "?"}`;
  });
  $("file-translate").addEventListener("click", translateFile);
  $("map-sentence").addEventListener("change", () => drawMap(state.maps[Number($("map-sentence").value)]));
  $("show-map").addEventListener("change", () => {
    if (!$("show-map").checked) showMaps([]);
  });
  try {
    [state.settings, state.languages] = await Promise.all([getJson("/frontend/settings"), getJson("/languages")]);
    fillPickers();
    document.body.dataset.ready = "true";
  } catch (err) {
    say(`Could not load the server's languages: ${err.message}`, true);
  }
}

document.addEventListener("DOMContentLoaded", start);
