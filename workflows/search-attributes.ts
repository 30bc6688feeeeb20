import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Custom search attributes the Web UI filters on. Registered by the dev-server scripts and the control plane. */
export const FleetStatus = defineSearchAttributeKey('FleetStatus', SearchAttributeType.KEYWORD);
export const FleetPool = defineSearchAttributeKey('FleetPool', SearchAttributeType.KEYWORD);
export const FleetHostId = defineSearchAttributeKey('FleetHostId', SearchAttributeType.KEYWORD);
export const FleetDeviceId = defineSearchAttributeKey('FleetDeviceId', SearchAttributeType.KEYWORD);
export const FleetDriverType = defineSearchAttributeKey('FleetDriverType', SearchAttributeType.KEYWORD);
export const FleetAttempt = defineSearchAttributeKey('FleetAttempt', SearchAttributeType.INT);
export const FleetKind = defineSearchAttributeKey('FleetKind', SearchAttributeType.KEYWORD);

export const ALL_SEARCH_ATTRIBUTES = [
  FleetStatus,
  FleetPool,
  FleetHostId,
  FleetDeviceId,
  FleetDriverType,
  FleetAttempt,
  FleetKind,
];

/** A string value for a visibility query (list filter): double-quoted, quotes and backslashes dropped. */
export const visibilityString = (v: string): string => `"${v.replace(/["\\]/g, '')}"`;

/** A visibility filter for runs that ended without completing (terminated, failed, timed out, cancelled). */
export const STOPPED = `ExecutionStatus IN ('Terminated', 'Failed', 'TimedOut', 'Canceled')`;
