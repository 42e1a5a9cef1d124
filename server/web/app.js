// attnserve's web page: text and file translation over the server's LibreTranslate routes.
// Vanilla JS, no dependencies; everything it loads comes from this server.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "attnserve.apiKey";
const FORMAT_NAMES = { text: "Plain text", html: "HTML", markdown: "Markdown" };
const state = { languages: [], settings: {}, maps: [], shown: null };
// Between two looks at a file job's progress: 300 ms at first, half as often again each time up to
// 2 s, since each look counts against the client's request rates (a long job would spend them).
const JOB_POLL_MS = 300;
const JOB_POLL_MAX_MS = 2000;
const UNREACHABLE_TRIES = 6; // a server not answering (restarting, a dropped connection): ~40 s of tries

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The seconds a reply asks the page to wait before asking again (429: past the client's request
// rates, or banned for a while; 503: the server draining or loading), from its Retry-After; null
// for any other reply.
function waitAsked(reply) {
  if (reply.status !== 429 && reply.status !== 503) return null;
  const seconds = Number(reply.headers.get("Retry-After"));
  return Number.isFinite(seconds) && seconds > 0 ? seconds : 5;
}

// fetch(path) again while the server asks to wait (waitAsked) or cannot be reached, saying so on
// the file's status line; the reply, or null after UNREACHABLE_TRIES tries that reached nothing.
async function patiently(path, headers, what) {
  for (let failures = 0; ; ) {
    let reply;
    try {
      reply = await fetch(path, { headers });
    } catch {
      if (++failures >= UNREACHABLE_TRIES) return null;
      say(`${what}: the server could not be reached; trying again…`, false, "file-status");
      await sleep(Math.min(1000 * 2 ** failures, 10000));
      continue;
    }
    const wait = waitAsked(reply);
    if (wait === null) return reply;
    const body = await reply.json().catch(() => ({}));
    say(`${what}: ${body.error || body.message || `HTTP ${reply.status}`}; asking again in ${wait} s`, false, "file-status");
    await sleep(wait * 1000);
  }
}

function apiKey() {
  return $("api-key").value.trim();
}

// A message in the status line beside the buttons it answers: "status" (text), "file-status" (file).
function say(message, error = false, where = "status") {
  const status = $(where);
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

function targetsOf(source) {
  if (source === "auto") return [...new Set(state.languages.flatMap((l) => l.targets))];
  return (state.languages.find((l) => l.code === source) || { targets: [] }).targets;
}

function fillTargets() {
  const target = $("target");
  const before = target.value;
  const codes = targetsOf($("source").value);
  target.replaceChildren(...codes.map((c) => option(c, nameOf(c))));
  if (codes.includes(before)) target.value = before;
  updateSwap();
}

// Swapping needs the reverse pair served: with en -> de alone, de is no source to pick.
function updateSwap() {
  const source = $("source").value;
  const target = $("target").value;
  const swap = $("swap");
  swap.disabled = source === "auto" || !target || !targetsOf(target).includes(source);
  swap.title = swap.disabled ? `No model translates ${nameOf(target)} into ${nameOf(source)}` : "Swap languages";
}

function swapLanguages() {
  const source = $("source").value;
  const target = $("target").value;
  if (source === "auto" || !targetsOf(target).includes(source)) return;
  $("source").value = target;
  fillTargets();
  $("target").value = source;
  updateSwap();
  if ($("result").value) {
    $("text").value = $("result").value; // the translation becomes the text, as translators do
    $("result").value = "";
    state.shown = null;
    showMaps([]);
  }
}

// What is served, in pairs: "1 pair: en → de"; a longer list is counted, not listed.
function servedPairs() {
  const pairs = state.languages.flatMap((l) => l.targets.map((t) => `${l.code} → ${t}`));
  const count = `${pairs.length} ${pairs.length === 1 ? "pair" : "pairs"}`;
  if (pairs.length && pairs.length <= 4) return `${count}: ${pairs.join(", ")}`;
  const languages = new Set(state.languages.filter((l) => l.targets.length).map((l) => l.code));
  state.languages.forEach((l) => l.targets.forEach((t) => languages.add(t)));
  return `${count} among ${languages.size} languages`;
}

// The name the CLI gives a translated file: report.docx -> report.de.docx.
function translatedName(name, target) {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? `${name.slice(0, dot)}.${target}${name.slice(dot)}` : `${name}.${target}`;
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
  updateSwap();
  const formats = (settings.formats || ["text"]).filter((f) => f in FORMAT_NAMES);
  $("format").replaceChildren(...formats.map((f) => option(f, FORMAT_NAMES[f])));
  const files = settings.supportedFilesFormat || [];
  $("file").accept = files.join(",");
  $("file-formats").textContent = files.length ? `Formats: ${files.join(" ")}` : "Files are not translated here.";
  $("key-box").open = Boolean(settings.keyRequired) && !apiKey();
  $("served").textContent = `${servedPairs()}; up to ${settings.charLimit} characters per text.`;
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
  const asked = { q: text, source: $("source").value, target: $("target").value, format: $("format").value };
  try {
    const body = await postTranslate(asked, $("show-map").checked);
    $("result").value = body.translatedText;
    state.shown = asked;
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

async function postTranslate(asked, attention) {
  const reply = await fetch("/translate", {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ ...asked, api_key: apiKey(), ...(attention ? { attention: true } : {}) }),
  });
  const body = await reply.json().catch(() => ({}));
  if (!reply.ok) throw new Error(body.error || `HTTP ${reply.status}`);
  return body;
}

// Ticked after a translation: the map of the translation shown, asked of the server for that text.
async function mapShownTranslation() {
  const asked = state.shown;
  if (!asked) {
    say("Translate a text to see its attention map.");
    return;
  }
  say("Reading the attention map…");
  try {
    const body = await postTranslate(asked, true);
    if (state.shown !== asked || !$("show-map").checked) return; // translated again, or unticked, meanwhile
    showMaps(body.attention || []);
    say(body.attention && body.attention.length ? "Attention map shown." : "This model returns no attention map.");
  } catch (err) {
    say(`Attention map failed: ${err.message}`, true);
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
// link's URL would stay in the history and in proxies' logs. The blob's URL and the name the
// server gives the file (its Content-Disposition), or null (said why).
async function downloaded(path, fallbackName) {
  const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
  const reply = await patiently(path, headers, "Download");
  if (!reply) {
    say("Download failed: the server could not be reached.", true, "file-status");
    return null;
  }
  if (!reply.ok) {
    const body = await reply.json().catch(() => ({}));
    say(`Download failed: ${body.error || `HTTP ${reply.status}`}`, true, "file-status");
    return null;
  }
  const named = /filename\*=UTF-8''([^;]+)/i.exec(reply.headers.get("Content-Disposition") || "");
  let name = fallbackName;
  try {
    if (named) name = decodeURIComponent(named[1]);
  } catch {
    // a malformed escape: the name the page makes
  }
  return { url: URL.createObjectURL(await reply.blob()), name };
}

// A file job polled until it ends (the key travels in a header, which EventSource cannot send),
// its sentences done / total shown on the bar; the finished job, or null (said why). A refusal to
// wait out (past the request rates, a restart) is waited out, as the server asks.
async function followJob(id, name, progress) {
  const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
  for (let pause = JOB_POLL_MS; ; pause = Math.min(pause * 1.5, JOB_POLL_MAX_MS)) {
    const reply = await patiently(`/jobs/${encodeURIComponent(id)}`, headers, `Translating ${name}`);
    if (!reply) {
      say("File translation failed: the server could not be reached.", true, "file-status");
      return null;
    }
    const job = await reply.json().catch(() => ({}));
    if (!reply.ok) {
      say(`File translation failed: ${job.error || `HTTP ${reply.status}`}`, true, "file-status");
      return null;
    }
    if (job.status === "done") return job;
    if (job.status === "failed" || job.status === "cancelled") {
      say(`File translation ${job.status}: ${job.error || "no result"}`, true, "file-status");
      return null;
    }
    if (job.total) {
      progress.max = job.total;
      progress.value = job.done;
      const left = job.remaining_s == null ? "" : `, about ${Math.ceil(job.remaining_s)} s left`;
      say(`Translating ${name}: ${job.done} / ${job.total} sentences${left}`, false, "file-status");
    } else if (job.done) {
      // sentences done before the file is split to its end: its total is not known yet
      say(`Translating ${name}: ${job.done} sentences done, counting the rest`, false, "file-status");
    }
    await sleep(pause);
  }
}

function translateFile() {
  const file = $("file").files[0];
  if (!file) {
    say("Choose a file to translate first.", true, "file-status");
    $("file").focus();
    return;
  }
  const target = $("target").value;
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("source", $("source").value);
  form.append("target", target);
  form.append("api_key", apiKey());
  const progress = $("file-progress");
  const link = $("download");
  const button = $("file-translate");
  progress.hidden = false;
  progress.max = 100;
  progress.value = 0;
  link.hidden = true;
  button.disabled = true;
  say(`Uploading ${file.name}…`, false, "file-status");
  const xhr = new XMLHttpRequest();
  xhr.open("POST", "/jobs");
  xhr.responseType = "json";
  xhr.upload.onprogress = (e) => {
    if (e.lengthComputable) progress.value = (100 * e.loaded) / e.total;
  };
  xhr.upload.onload = () => {
    progress.removeAttribute("value"); // indeterminate while the server translates
    say(`Translating ${file.name}…`, false, "file-status");
  };
  xhr.onload = async () => {
    const body = xhr.response || {};
    if (xhr.status !== 202 || !body.id) {
      button.disabled = false;
      progress.hidden = true;
      say(`File translation failed: ${body.error || `HTTP ${xhr.status}`}`, true, "file-status");
      return;
    }
    const job = await followJob(body.id, file.name, progress);
    button.disabled = false;
    progress.hidden = true;
    if (!job) return;
    const saved = await downloaded(`/jobs/${encodeURIComponent(job.id)}/result`, translatedName(file.name, target));
    if (!saved) return;
    if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
    link.href = saved.url;
    const name = saved.name;
    link.download = name;
    link.textContent = `Download ${name}`;
    link.hidden = false;
    link.focus();
    say(`${file.name} translated (${job.total} sentence${job.total === 1 ? "" : "s"}).`, false, "file-status");
  };
  xhr.onerror = () => {
    button.disabled = false;
    progress.hidden = true;
    say("File translation failed: the server could not be reached.", true, "file-status");
  };
  xhr.send(form);
}

async function start() {
  $("api-key").value = localStorage.getItem(KEY_STORE) || "";
  $("api-key").addEventListener("change", () => localStorage.setItem(KEY_STORE, apiKey()));
  $("source").addEventListener("change", fillTargets);
  $("target").addEventListener("change", updateSwap);
  $("swap").addEventListener("click", swapLanguages);
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
    if ($("show-map").checked) {
      mapShownTranslation();
    } else {
      showMaps([]);
      say("");
    }
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
