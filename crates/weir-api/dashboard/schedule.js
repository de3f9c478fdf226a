// A flag rollout's schedule, as weir-core expands it (crates/weir-core/src/machine/steps.rs,
// `schedule_entries`): the preview shows the entries the server will run.

/** Interval lengths in seconds (weir-core's `ScheduleInterval::seconds`). */
export const INTERVALS = { hourly: 3600, daily: 86400, weekly: 604800 };
/** weir-core's MAX_STEPS: no schedule has more entries. */
export const MAX_STEPS = 10000;
/** weir-core's MIN_SCHEDULE_GAP_SECONDS (only checked for manual entries). */
export const MIN_GAP_SECONDS = 300;

/** A percentage to basis points, as weir parses weights (0.01% resolution); NaN if not one. */
export function basisPoints(percent) {
  const value = Number(percent);
  if (!Number.isFinite(value) || value < 0) return NaN;
  const scaled = value * 100;
  return Math.abs(scaled - Math.round(scaled)) > 1e-6 ? NaN : Math.round(scaled);
}

/**
 * The entries of a template `{start, interval, increments}`: from `start` every interval, the
 * weight growing by `increments` and capped at 100%, until 100% (none when increments is 0).
 * Returns `[{at: Date, weight: percent}]`.
 */
export function expandTemplate(template) {
  const step = basisPoints(template.increments);
  const start = new Date(template.start);
  const interval = INTERVALS[template.interval];
  const entries = [];
  if (!(step > 0) || Number.isNaN(start.getTime()) || !interval) return entries;
  let weight = 0;
  let at = start.getTime();
  while (weight < 10000 && entries.length < MAX_STEPS) {
    weight = Math.min(weight + step, 10000);
    entries.push({ at: new Date(at), weight: weight / 100 });
    at += interval * 1000;
  }
  return entries;
}

/** Manual rows `[{at, weight}]` as entries (in the order written, as the server keeps them). */
export function expandManual(rows) {
  return rows
    .slice(0, MAX_STEPS)
    .map((row) => ({ at: new Date(row.at), weight: Number(row.weight) }))
    .filter((entry) => !Number.isNaN(entry.at.getTime()));
}

/**
 * The plan as the API takes it: `{schedule: {manual: [...]}}` or `{schedule: {template: {...}}}`.
 * Weights go as numbers (the server checks them); times as RFC 3339 in UTC.
 */
export function planOf(kind, manualRows, template) {
  if (kind === "manual") {
    return { schedule: { manual: manualRows.map((row) => ({ at: toUtc(row.at), weight: numberOrText(row.weight) })) } };
  }
  return { schedule: { template: { start: toUtc(template.start), interval: template.interval, increments: numberOrText(template.increments) } } };
}

function numberOrText(value) {
  const number = Number(value);
  return value === "" || Number.isNaN(number) ? value : number;
}

/** A `datetime-local` value (the viewer's zone) as RFC 3339 UTC; the text as is if not a time. */
export function toUtc(local) {
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? local : date.toISOString().replace(".000Z", "Z");
}

/** A Date as a `datetime-local` value in the viewer's zone (minutes). */
export function toLocalInput(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}
