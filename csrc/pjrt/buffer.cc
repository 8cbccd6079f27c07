#include "buffer.h"

#include <cstring>
#include <utility>

#include "client.h"
#include "error.h"

namespace torch_tpu::pjrt {

size_t ByteWidth(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED:
    case PJRT_Buffer_Type_S8:
    case PJRT_Buffer_Type_U8:
    case PJRT_Buffer_Type_F8E5M2:
    case PJRT_Buffer_Type_F8E4M3FN:
    case PJRT_Buffer_Type_F8E5M2FNUZ:
    case PJRT_Buffer_Type_F8E4M3FNUZ:
      return 1;
    case PJRT_Buffer_Type_S16:
    case PJRT_Buffer_Type_U16:
    case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
      return 2;
    case PJRT_Buffer_Type_S32:
    case PJRT_Buffer_Type_U32:
    case PJRT_Buffer_Type_F32:
      return 4;
    case PJRT_Buffer_Type_S64:
    case PJRT_Buffer_Type_U64:
    case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
      return 8;
    case PJRT_Buffer_Type_C128:
      return 16;
    default:
      throw PjrtError(PJRT_Error_Code_UNIMPLEMENTED,
                      "unsupported PJRT element type " + ElementTypeName(type));
  }
}

std::string ElementTypeName(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED:
      return "pred";
    case PJRT_Buffer_Type_S8:
      return "s8";
    case PJRT_Buffer_Type_S16:
      return "s16";
    case PJRT_Buffer_Type_S32:
      return "s32";
    case PJRT_Buffer_Type_S64:
      return "s64";
    case PJRT_Buffer_Type_U8:
      return "u8";
    case PJRT_Buffer_Type_U16:
      return "u16";
    case PJRT_Buffer_Type_U32:
      return "u32";
    case PJRT_Buffer_Type_U64:
      return "u64";
    case PJRT_Buffer_Type_F16:
      return "f16";
    case PJRT_Buffer_Type_BF16:
      return "bf16";
    case PJRT_Buffer_Type_F32:
      return "f32";
    case PJRT_Buffer_Type_F64:
      return "f64";
    case PJRT_Buffer_Type_C64:
      return "c64";
    case PJRT_Buffer_Type_C128:
      return "c128";
    case PJRT_Buffer_Type_F8E5M2:
      return "f8e5m2";
    case PJRT_Buffer_Type_F8E4M3FN:
      return "f8e4m3fn";
    case PJRT_Buffer_Type_F8E5M2FNUZ:
      return "f8e5m2fnuz";
    case PJRT_Buffer_Type_F8E4M3FNUZ:
      return "f8e4m3fnuz";
    default:
      return "type#" + std::to_string(static_cast<int>(type));
  }
}

int64_t ElementCount(const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t dim : dims) count *= dim;
  return count;
}

PjrtBuffer::PjrtBuffer(std::shared_ptr<const PjrtClient> client, PJRT_Buffer* buffer)
    : client_(std::move(client)), buffer_(buffer) {}

PjrtBuffer::PjrtBuffer(PjrtBuffer&& other) noexcept
    : client_(std::move(other.client_)), buffer_(std::exchange(other.buffer_, nullptr)) {}

PjrtBuffer& PjrtBuffer::operator=(PjrtBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    client_ = std::move(other.client_);
    buffer_ = std::exchange(other.buffer_, nullptr);
  }
  return *this;
}

PjrtBuffer::~PjrtBuffer() { Reset(); }

void PjrtBuffer::Reset() {
  if (buffer_ == nullptr) return;
  const PJRT_Api* api = client_->api();
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ConsumeError(api, api->PJRT_Buffer_Destroy(&args));  // cannot throw from a destructor
  buffer_ = nullptr;
}

PJRT_Buffer_Type PjrtBuffer::element_type() const {
  PJRT_Buffer_ElementType_Args args{};
  args.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_ElementType(&args),
               "PJRT_Buffer_ElementType");
  return args.type;
}

std::vector<int64_t> PjrtBuffer::dimensions() const {
  PJRT_Buffer_Dimensions_Args args{};
  args.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_Dimensions(&args),
               "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

size_t PjrtBuffer::host_size_bytes() const {
  return static_cast<size_t>(ElementCount(dimensions())) * ByteWidth(element_type());
}

size_t PjrtBuffer::on_device_size_bytes() const {
  PJRT_Buffer_OnDeviceSizeInBytes_Args args{};
  args.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_OnDeviceSizeInBytes(&args),
               "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

PjrtEvent PjrtBuffer::ToHost(void* destination, size_t destination_size) const {
  const size_t expected = host_size_bytes();
  if (destination_size != expected) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    "device-to-host copy of a " + ElementTypeName(element_type()) + " buffer of " +
                        std::to_string(expected) + " bytes into a host buffer of " +
                        std::to_string(destination_size) + " bytes");
  }
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = buffer_;
  args.dst = destination;
  args.dst_size = destination_size;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_ToHostBuffer(&args),
               "PJRT_Buffer_ToHostBuffer");
  return PjrtEvent(client_->plugin(), args.event);
}

void PjrtBuffer::CopyToHostNow(void* destination, size_t destination_size) const {
  if (client_->device_memory_is_host_memory() && destination_size == host_size_bytes() &&
      destination_size == on_device_size_bytes()) {
    ReadyEvent().Await();
    if (destination_size != 0) std::memcpy(destination, HostAddress(), destination_size);
    return;
  }
  ToHost(destination, destination_size).Await();
}

PjrtEvent PjrtBuffer::ReadyEvent() const {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_ReadyEvent(&args),
               "PJRT_Buffer_ReadyEvent");
  return PjrtEvent(client_->plugin(), args.event);
}

bool PjrtBuffer::IsDeleted() const {
  PJRT_Buffer_IsDeleted_Args args{};
  args.struct_size = PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_IsDeleted(&args),
               "PJRT_Buffer_IsDeleted");
  return args.is_deleted;
}

PJRT_Device* PjrtBuffer::device() const {
  PJRT_Buffer_Device_Args args{};
  args.struct_size = PJRT_Buffer_Device_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_Device(&args), "PJRT_Buffer_Device");
  return args.device;
}

PjrtBuffer PjrtBuffer::CopyToDevice(PJRT_Device* device) const {
  PJRT_Buffer_CopyToDevice_Args args{};
  args.struct_size = PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  args.dst_device = device;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_CopyToDevice(&args),
               "PJRT_Buffer_CopyToDevice");
  return PjrtBuffer(client_, args.dst_buffer);
}

void* PjrtBuffer::HostAddress() const {
  PJRT_Buffer_UnsafePointer_Args args{};
  args.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
  args.buffer = buffer_;
  ThrowIfError(client_->api(), client_->api()->PJRT_Buffer_UnsafePointer(&args),
               "PJRT_Buffer_UnsafePointer");
  return reinterpret_cast<void*>(args.buffer_pointer);
}

}  // namespace torch_tpu::pjrt
