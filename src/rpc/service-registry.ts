import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";

/** A service descriptor with its implementation: what every transport registers. */
export interface ServiceBinding {
  desc: DescService;
  // biome-ignore lint/suspicious/noExplicitAny: implementations are checked where bindings are built (bind()).
  impl: ServiceImpl<any>;
}

/** Pairs a descriptor with its implementation, type-checked. */
export function bind<S extends DescService>(desc: S, impl: ServiceImpl<S>): ServiceBinding {
  return { desc, impl };
}
