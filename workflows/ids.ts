/**
 * Every workflow ID and task-queue name is built here, and only here.
 * Workflow code, the control plane, the host agent and the tests all import these functions.
 */
export const DEFAULT_POOL = 'default';
export const DEFAULT_CONTROL_TASK_QUEUE = 'fleet.control';

export const taskWorkflowId = (taskId: string): string => `task/${taskId}`;
export const schedulerWorkflowId = (pool: string): string => `scheduler/${pool}`;
export const deviceWorkflowId = (hostId: string, deviceId: string): string => `device/${hostId}/${deviceId}`;
export const hostWorkflowId = (hostId: string): string => `host/${hostId}`;
/** The recovery a scheduler run started anew begins (workflows/recovery.ts): one per such run. */
export const poolRecoveryWorkflowId = (pool: string, schedulerRunId: string): string =>
  `recovery/${pool}/${schedulerRunId}`;
export const hostTaskQueue = (hostId: string): string => `fleet.host.${hostId}`;

export const deviceKey = (hostId: string, deviceId: string): string => `${hostId}/${deviceId}`;

/** IDs become parts of workflow IDs and task-queue names: keep them boring. */
const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export function isValidId(value: unknown): value is string {
  return typeof value === 'string' && ID_PATTERN.test(value);
}
export const ID_RULE = 'letters, digits, ".", "_", ":", "-"; 1-128 characters; starting with a letter or digit';

/** The device tag a task naming this workflow definition requires; a host whose runner has it advertises it. */
export const definitionTag = (name: string): string => `definition:${name}`;
/** The device tag a task that brings its own definition steps requires (hosts that run such steps advertise it). */
export const INLINE_STEPS_TAG = 'inline-steps';
