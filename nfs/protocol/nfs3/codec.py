"""Field tables for XDR structs: each wire struct lists its fields' codecs once.

As pynfs generates its packers from the ``.x`` file, a struct here declares, in XDR
order, one codec per dataclass field, and `XdrStruct.pack` / `XdrStruct.unpack` walk
that table::

    @dataclass(frozen=True)
    class Read3Args(XdrStruct):
        file: NfsFh3
        offset: int
        count: int
        XDR = (NfsFh3, UHYPER, UINT)

An entry is a `Codec` (`UINT`, `UHYPER`, `BOOL`, `enum_of(StableHow)`, `fopaque(8)`,
`opaque()`, `string(4096)`, `optional(UINT)`, `list_of(Entry3)`) or a wire type with
``pack(p)`` and ``unpack(u)`` (a nested struct). Discriminated unions (`SetTime`,
`CreateHow3`, the ``XXX3res`` results) keep hand-written codecs.

Sans-IO and pure: imports only `nfs.protocol.xdr`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Protocol, Self, TypeVar

from nfs.protocol.xdr import Packer, Unpacker

__all__ = [
    "BOOL",
    "UHYPER",
    "UINT",
    "Codec",
    "XdrStruct",
    "compiled_packer",
    "direct_unpacker",
    "enum_of",
    "fopaque",
    "list_of",
    "opaque",
    "optional",
    "string",
]

T = TypeVar("T")
E = TypeVar("E", bound=enum.IntEnum)


class Wire(Protocol):
    """A wire type: packs itself; its class unpacks (`XdrStruct`, `NfsFh3`, ...)."""

    def pack(self, p: Packer) -> None:
        """Append this value to `p`."""
        ...


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """How one field goes on the wire: a packer and an unpacker."""

    pack: Callable[[Packer, T], None]
    unpack: Callable[[Unpacker], T]


UINT: Final[Codec[int]] = Codec(Packer.pack_uint, Unpacker.unpack_uint)
UHYPER: Final[Codec[int]] = Codec(Packer.pack_uhyper, Unpacker.unpack_uhyper)
BOOL: Final[Codec[bool]] = Codec(Packer.pack_bool, Unpacker.unpack_bool)


def enum_of(enum_type: type[E]) -> Codec[E]:
    """Return the codec of an XDR enum (an unknown value is `XdrError`)."""
    return Codec(Packer.pack_enum, lambda u: u.unpack_enum(enum_type))


def fopaque(size: int) -> Codec[bytes]:
    """Return the codec of ``opaque[size]`` (fixed length)."""
    return Codec(lambda p, v: p.pack_fopaque(size, v), lambda u: u.unpack_fopaque(size))


def opaque(max_size: int | None = None) -> Codec[bytes]:
    """Return the codec of ``opaque<max_size>`` (variable length)."""
    return Codec(lambda p, v: p.pack_opaque(v, max_size), lambda u: u.unpack_opaque(max_size))


def string(max_size: int | None = None) -> Codec[str]:
    """Return the codec of ``string<max_size>``."""
    return Codec(lambda p, v: p.pack_string(v, max_size), lambda u: u.unpack_string(max_size))


def _pack_wire(p: Packer, value: Wire) -> None:
    value.pack(p)


def codec_of(spec: Codec[Any] | type[Any]) -> Codec[Any]:
    """Return `spec` if it is a codec, else the codec of the wire type `spec`."""
    if isinstance(spec, Codec):
        return spec
    return Codec(_pack_wire, spec.unpack)


def optional(item: Codec[Any] | type[Any]) -> Codec[Any]:
    """Return the codec of ``*item`` (an optional value: a bool, then the value if TRUE)."""
    c = codec_of(item)
    return Codec(
        lambda p, v: p.pack_optional(v, lambda x: c.pack(p, x)),
        lambda u: u.unpack_optional(lambda: c.unpack(u)),
    )


def list_of(item: Codec[Any] | type[Any]) -> Codec[Any]:
    """Return the codec of an XDR linked list (value-follows flags) read as a tuple."""
    c = codec_of(item)
    return Codec(
        lambda p, v: p.pack_list(v, lambda x: c.pack(p, x)),
        lambda u: tuple(u.unpack_list(lambda: c.unpack(u))),
    )


_LAYOUTS: dict[type[Any], tuple[tuple[str, Codec[Any]], ...]] = {}


def _layout(cls: type[XdrStruct]) -> tuple[tuple[str, Codec[Any]], ...]:
    """Pair the dataclass fields of `cls` with its `XDR` codecs (checked once per class)."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        if len(names) != len(cls.XDR):
            raise TypeError(f"{cls.__name__}: {len(names)} fields but {len(cls.XDR)} codecs")
        layout = tuple(zip(names, map(codec_of, cls.XDR), strict=True))
        _LAYOUTS[cls] = layout
    return layout


_Packer = Callable[[Any, Packer], None]
_Unpacker = Callable[[Unpacker], Any]
_COMPILED: dict[type[Any], tuple[_Packer, _Unpacker]] = {}


def _compiled(cls: type[XdrStruct]) -> tuple[_Packer, _Unpacker]:
    """The packer and unpacker of `cls`: straight-line functions made from its field
    table once (as pynfs generates its packers), instead of a walk over the table per
    value; nested wire types are packed by their own ``pack``."""
    got = _COMPILED.get(cls)
    if got is not None:
        return got
    names: dict[str, Any] = {"cls": cls}
    pack = ["def pack(self, p):", "    pass"]
    unpack = ["def unpack(u):", "    return cls("]
    for i, ((name, codec), spec) in enumerate(zip(_layout(cls), cls.XDR, strict=True)):
        if codec.pack is _pack_wire:
            pack.append(f"    self.{name}.pack(p)")
        else:
            names[f"pack_{i}"] = codec.pack
            pack.append(f"    pack_{i}(p, self.{name})")
        if isinstance(spec, Codec):
            names[f"unpack_{i}"] = codec.unpack
            unpack.append(f"        unpack_{i}(u),")
        else:  # a nested wire type: its unpack as it is then (compiled and installed)
            names[f"type_{i}"] = spec
            unpack.append(f"        type_{i}.unpack(u),")
    unpack.append("    )")
    exec("\n".join(pack) + "\n" + "\n".join(unpack), names)  # our own field names only
    got = (names["pack"], names["unpack"])
    _COMPILED[cls] = got
    return got


class XdrStruct:
    """Base of a frozen dataclass whose fields, in order, are packed by the codecs in `XDR`."""

    XDR: ClassVar[Sequence[Codec[Any] | type[Any]]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass packs by its own field table: it starts with the generic ``pack``
        and ``unpack`` (which `_install` replaces by its compiled ones), never a compiled
        parent's."""
        super().__init_subclass__(**kwargs)
        for name in ("pack", "unpack"):
            if name not in cls.__dict__:
                setattr(cls, name, XdrStruct.__dict__[name])

    def pack(self, p: Packer) -> None:
        """Append the fields in order."""
        cls = type(self)
        got = _COMPILED.get(cls) or _compiled(cls)
        _install(cls)
        got[0](self, p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Self:
        """Read the fields in order (`XdrError` on short or bad input)."""
        got = _COMPILED.get(cls) or _compiled(cls)
        _install(cls)
        value: Self = got[1](u)
        return value


def compiled_packer(cls: type[XdrStruct]) -> Callable[[Any, Packer], None]:
    """The packer `cls`'s field table makes (the one a hand-written ``pack`` must match)."""
    return (_COMPILED.get(cls) or _compiled(cls))[0]


def direct_unpacker(unpack: Callable[[Unpacker], T]) -> Callable[[Unpacker], T]:
    """``unpack`` itself, or, for an `XdrStruct`'s inherited ``unpack`` (a bound method
    taken before the class was compiled: a procedure's argument decoder), its compiled
    unpacker (no lookup and no frame of `XdrStruct.unpack` per call)."""
    cls = getattr(unpack, "__self__", None)
    if (
        isinstance(cls, type)
        and issubclass(cls, XdrStruct)
        and getattr(unpack, "__func__", None) is getattr(XdrStruct.unpack, "__func__", None)
    ):
        compiled: Callable[[Unpacker], T] = (_COMPILED.get(cls) or _compiled(cls))[1]
        return compiled
    return unpack


def _install(cls: type[XdrStruct]) -> None:
    """Make `cls`'s compiled packer and unpacker its ``pack`` and ``unpack`` (no lookup and
    no frame of `XdrStruct`'s per value, a handle in every call), unless the class
    defines its own (`XdrStruct.__init_subclass__` gives each the generic ones)."""
    pack, unpack = _COMPILED[cls]
    if cls.__dict__.get("pack") is XdrStruct.__dict__["pack"]:
        setattr(cls, "pack", pack)  # noqa: B010 - a class attribute set after the fact
    if cls.__dict__.get("unpack") is XdrStruct.__dict__["unpack"]:
        setattr(cls, "unpack", staticmethod(unpack))  # noqa: B010
