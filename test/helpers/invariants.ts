/** The history auditor lives in control-plane/audit.ts (the chaos suite uses it too). */
export * from '../../control-plane/audit';
export { registerHostBoxKey as registerTestHostKey } from '../../control-plane/audit';
