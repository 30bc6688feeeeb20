/** The workflow bundle's entry point: every workflow type the control-plane worker serves. */
export { taskWorkflow } from './task';
export { schedulerWorkflow } from './scheduler';
export { deviceWorkflow } from './device';
export { hostWorkflow } from './host';
export { poolRecoveryWorkflow } from './recovery';
