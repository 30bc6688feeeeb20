/**
 * ApplicationFailure `type` strings that cross the sandbox boundary.
 * Declared once; activity retry policies and callers reuse these lists.
 */
export const ErrorType = {
  QueueFull: 'QueueFull',
  InvalidTask: 'InvalidTask',
  UnknownPool: 'UnknownPool',
  UnknownStrategy: 'UnknownStrategy',
  InvalidConfig: 'InvalidConfig',
  TaskFailed: 'TaskFailed',
  StaleLease: 'StaleLease',
  WrongHost: 'WrongHost',
  DeviceUnavailable: 'DeviceUnavailable',
  UnknownDefinition: 'UnknownDefinition',
  RunnerFailed: 'RunnerFailed',
  ProgressBudget: 'ProgressBudget',
  BadSignature: 'BadSignature',
} as const;
export type ErrorTypeName = (typeof ErrorType)[keyof typeof ErrorType];

/** Failures of the host activity that no retry can fix. */
export const NON_RETRYABLE_HOST_ERRORS: string[] = [
  ErrorType.InvalidTask,
  ErrorType.UnknownDefinition,
  ErrorType.StaleLease,
  ErrorType.WrongHost,
];

/** Terminal reasons recorded on a task. */
export const Reason = {
  LeaseExpired: 'lease_expired',
  DispatchFailed: 'dispatch_failed',
  AckTimeout: 'ack_timeout',
  ReservationExpired: 'reservation_expired',
  ForgedResult: 'forged_result',
  HostRestarted: 'host_restarted',
  DeviceUnavailable: 'device_unavailable',
  ExecutionTimeout: 'execution_timeout',
  RunnerFailed: 'runner_failed',
  UnknownDefinition: 'unknown_definition',
  InvalidTask: 'invalid_task',
  HostError: 'host_error',
  Cancelled: 'cancelled',
  QueueFull: 'queue_full',
  UnknownPool: 'unknown_pool',
  /** No device was assigned within the policy's maxQueueWaitMs. */
  QueueTimeout: 'queue_timeout',
  /**
   * A retry could not be queued: the pool's scheduler was gone and the control plane could not
   * start it again (or the one it started closed at once).
   */
  SchedulerUnavailable: 'scheduler_unavailable',
} as const;
