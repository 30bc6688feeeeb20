/** Human output: compact tables and a task's details. `--json` bypasses all of this. */
import type { DeviceResource, HostResource } from '../rest/fleet/schemas';
import type { TaskResource, TaskSummary } from '../rest/tasks/schemas';

export function table(headers: string[], rows: Array<Array<string | number | undefined>>): string {
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === undefined || c === '' ? '-' : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ')).join('\n') + '\n';
}

const time = (iso: string | undefined): string | undefined => iso?.replace('T', ' ').replace(/\.\d+Z$/, 'Z');

export const taskTable = (items: TaskSummary[]): string =>
  items.length === 0
    ? 'no tasks\n'
    : table(
        ['TASK', 'STATUS', 'POOL', 'HOST', 'DEVICE', 'ATTEMPTS', 'OWNER', 'SUBMITTED'],
        items.map((t) => [t.taskId, t.status, t.pool, t.hostId, t.deviceId, t.attempts, t.owner, time(t.submittedAt)]),
      );

const workOf = (t: TaskResource): string =>
  t.work.kind === 'goal' ? `goal: ${t.work.goal}` : `definition: ${t.work.definition}`;

const constraintsOf = (t: TaskResource): string => {
  const c = t.constraints;
  const parts = [
    c.driverType && `driverType=${c.driverType}`,
    c.tags.length > 0 && `tags=${c.tags.join(',')}`,
    c.hostId && `host=${c.hostId}`,
    c.deviceId && `device=${c.deviceId}`,
  ].filter(Boolean);
  return parts.length > 0 ? parts.join(' ') : 'none';
};

export function taskDetails(t: TaskResource): string {
  const rows: Array<[string, string | undefined]> = [
    ['task', t.taskId],
    ['status', `${t.status}${t.cancelRequested && t.status !== 'cancelled' ? ' (cancel requested)' : ''}`],
    ['pool', t.pool],
    ['owner', t.owner],
    ['work', workOf(t)],
    ['constraints', constraintsOf(t)],
    ['priority', String(t.priority)],
    ['attempts', t.incomplete ? `not known (${t.incomplete})` : `${t.attempts.length} of ${t.policy.maxAttempts}`],
    ['submitted', time(t.submittedAt)],
  ];
  if (t.current) rows.push(['current', `attempt ${t.current.attempt} on ${t.current.hostId}/${t.current.deviceId}`]);
  if (t.nextAttemptAt) rows.push(['next attempt', time(t.nextAttemptAt)]);
  // Every attempt that ended, and why: where a retry came from is the first thing an operator asks.
  for (const a of t.attempts) {
    if (a.endedAt === undefined) continue;
    // A done attempt's message is its output (shown once, below); a failure's first line says why.
    const line = a.outcome === 'done' ? undefined : a.message?.split('\n')[0].slice(0, 160);
    const why = [a.outcome, a.reason && a.reason !== a.outcome && `(${a.reason})`, line && `- ${line}`];
    rows.push([
      `attempt ${a.attempt}`,
      `${a.hostId}/${a.deviceId} ${why.filter(Boolean).join(' ')} at ${time(a.endedAt)}`,
    ]);
  }
  if (t.queue) rows.push(['queue', queueLine(t.queue)]);
  if (t.progress) rows.push(['progress', t.progress.message]);
  if (t.result) {
    const r = t.result;
    rows.push([
      'result',
      [r.status, r.reason && r.reason !== r.status && `(${r.reason})`, r.message].filter(Boolean).join(' '),
    ]);
    if (r.output) rows.push(['output', r.output]);
    rows.push(['finished', time(r.finishedAt)]);
  }
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v ?? '-'}`).join('\n') + '\n';
}

const queueLine = (q: NonNullable<TaskResource['queue']>): string =>
  `${q.position !== undefined ? `#${q.position} of ${q.length}, ` : ''}${q.ahead} ahead, waiting for ${q.waitingFor}: ${q.reason}`;

/** One line of the live --wait display. */
export function progressLine(t: TaskResource): string {
  const where = t.current ? ` attempt ${t.current.attempt} on ${t.current.hostId}/${t.current.deviceId}` : '';
  const what = t.progress?.message ?? (t.queue ? t.queue.reason : '');
  return `${t.taskId} ${t.status}${where}${what ? ` - ${what}` : ''}`;
}

export const hostTable = (items: HostResource[]): string =>
  items.length === 0
    ? 'no hosts\n'
    : table(
        ['HOST', 'POOL', 'ONLINE', 'DRAINED', 'DEVICES', 'DRAINED DEVICES', 'LAST SNAPSHOT'],
        items.map((h) => [
          h.hostId,
          h.pool,
          h.online ? 'yes' : 'no',
          h.drained ? 'yes' : 'no',
          h.devices.length,
          h.drainedDevices.join(','),
          time(h.lastSeenAt),
        ]),
      );

export const deviceTable = (items: DeviceResource[]): string =>
  items.length === 0
    ? 'no devices\n'
    : table(
        ['HOST', 'DEVICE', 'POOL', 'DRIVER', 'TAGS', 'STATE', 'HEALTH', 'DRAINED', 'ASSIGNABLE', 'TASK', 'WHY NOT'],
        items.map((d) => [
          d.hostId,
          d.deviceId,
          d.pool,
          d.driverType,
          d.tags.join(','),
          d.state,
          d.health,
          d.hostDrained ? 'host' : d.deviceDrained ? 'yes' : 'no',
          d.assignable ? 'yes' : 'no',
          d.reservation?.taskId,
          d.assignable ? '' : (d.unassignableBecause ?? 'unknown'),
        ]),
      );
